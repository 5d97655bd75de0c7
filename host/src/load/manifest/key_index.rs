//! docs/manifest-keys.md, the index of every manifest key, generated from
//! the tables that declare them (`limit_keys!`, `share_keys!`,
//! `decision_log_keys!`) and, for the keys no table declares, the lists
//! below; a test fails when the file differs (`TOOLGATE_BLESS=1` writes
//! it).

use std::fmt::Write as _;

use crate::runtime::limits::Limits;
use crate::runtime::limits::unit::Bound;

/// One row: table, key, type, default, the page that explains it.
type Row = (String, String, String, String, &'static str);

/// The limit keys, as (key, type) in order.
macro_rules! limit_rows {
    (keys { $( {
        $(#[$attr:meta])* $field:ident: $ty:ty = $default:expr;
        $key:ident: $raw:ty, $into:path, $written:path, $lo:expr, $hi:expr, $range_unit:literal;
        flag $_flag:tt
    } )* }) => {
        vec![$( (
            stringify!($key),
            if stringify!($hi).contains("EngineMaxMib") {
                format!("integer {}..=engine max{}", $lo, $range_unit.split(" (").next().unwrap_or(""))
            } else {
                let hi: $raw = Bound::bound($hi, 0);
                format!("integer {}..={}{}", $lo, hi, $range_unit)
            },
        ) ),*]
    };
}

/// The `[shares]` scalar keys, as (key, type, default).
macro_rules! share_rows {
    (fields { $( { $(#[$attr:meta])* $f:ident: $fty:ty = $default:expr } )* }
     keys { $( {
        $( scalar $field:ident, $key:ident: $raw:ty => $into:path, $lo:expr, $hi:expr, $unit:literal )?
        $( table $table:ident )?
     } )* }
     flags $_flags:tt) => {{
        let defaults: Vec<(&str, &str)> = vec![$( (stringify!($f), stringify!($default)) ),*];
        let json = serde_json::to_value(crate::runtime::shares::Shares::default())
            .expect("shares as JSON");
        let mut rows = Vec::new();
        $( $(
            let expr = defaults.iter().find(|(f, _)| *f == stringify!($field)).map_or("", |d| d.1);
            let default = if expr.contains("cores()") || expr.contains("memory_budget") {
                "depends on the machine".to_string()
            } else {
                format!("`{}`", json[stringify!($field)])
            };
            rows.push((
                stringify!($key),
                {
                    let (lo, hi): ($raw, $raw) = ($lo, $hi);
                    format!("integer {lo}..={hi}{}", $unit)
                },
                default,
            ));
        )? )*
        rows
    }};
}

/// The `[decision_log]` numbers, as (key, type, default).
macro_rules! decision_log_rows {
    (keys { $( {
        $(#[$doc:meta])* $field:ident: $ty:ty = $default:expr, $lo:expr, $hi:expr;
    } )* }) => {
        vec![$( (
            stringify!($field),
            {
                let (lo, hi): ($ty, $ty) = ($lo, $hi);
                format!("integer {lo}..={hi}")
            },
            format!("`{}`", ($default as $ty)),
        ) ),*]
    };
}

/// Keys no macro declares: (table, key, type, default, page).
const OWN_KEYS: &[(&str, &str, &str, &str, &str)] = &[
    (
        "[[plugin]]",
        "path",
        "string",
        "— (required, unless `url` or `oci`)",
        "plugins.md",
    ),
    ("[[plugin]]", "url", "string", "—", "remote.md"),
    (
        "[[plugin]]",
        "sha256",
        "string",
        "— (required with `url`)",
        "remote.md",
    ),
    ("[[plugin]]", "oci", "string", "—", "remote.md"),
    (
        "[[plugin]]",
        "plain_http",
        "boolean",
        "`false`",
        "remote.md",
    ),
    (
        "[[plugin]]",
        "name",
        "string",
        "the file's stem",
        "plugins.md",
    ),
    (
        "[[plugin]]",
        "on_error",
        "`\"skip\"` \\| `\"deny\"`",
        "`\"skip\"`",
        "plugins.md",
    ),
    (
        "[[plugin]]",
        "mode",
        "`\"enforce\"` \\| `\"shadow\"`",
        "`\"enforce\"`",
        "plugins.md",
    ),
    (
        "[[plugin]]",
        "prepared",
        "`\"auto\"` \\| integer 0..=8",
        "`\"auto\"`",
        "loading.md",
    ),
    (
        "[[plugin]]",
        "snapshot",
        "`\"auto\"` \\| boolean",
        "`\"auto\"`",
        "loading.md",
    ),
    (
        "[[plugin]]",
        "tenants",
        "array of tenant names",
        "every call",
        "plugins.md",
    ),
    ("[[plugin]]", "config", "table", "`{}`", "plugins.md"),
    (
        "[[plugin]]",
        "allowed_hosts",
        "array of strings",
        "`[]`",
        "http.md",
    ),
    (
        "[[plugin]]",
        "http_methods",
        "array of strings",
        "`[\"GET\", \"POST\"]`",
        "http.md",
    ),
    (
        "[[plugin]]",
        "allowed_networks",
        "array of strings",
        "`[]`",
        "http.md",
    ),
    (
        "[defaults]",
        "on_error",
        "`\"skip\"` \\| `\"deny\"`",
        "`\"skip\"`",
        "plugins.md",
    ),
    (
        "[defaults]",
        "snapshot",
        "`\"auto\"` \\| boolean",
        "`\"auto\"`",
        "loading.md",
    ),
    (
        "[ceilings]",
        "allowed_hosts",
        "array of strings",
        "`[]`",
        "tenants.md",
    ),
    (
        "[ceilings]",
        "http_methods",
        "array of strings",
        "`[\"GET\", \"POST\"]`",
        "tenants.md",
    ),
    (
        "[ceilings]",
        "allowed_networks",
        "array of strings",
        "`[]`",
        "tenants.md",
    ),
    (
        "[ceilings]",
        "plugin_sources",
        "array of strings",
        "`[]`",
        "remote.md",
    ),
    (
        "[ceilings]",
        "trusted_keys",
        "array of PEM strings",
        "`[]`",
        "remote.md",
    ),
    (
        "[ceilings]",
        "require_signatures",
        "boolean",
        "`false`",
        "remote.md",
    ),
    (
        "[shares]",
        "tenants",
        "tables `[shares.tenants.<name>]`",
        "none",
        "tenants.md",
    ),
    (
        "[shares.tenants.<name>]",
        "rate",
        "integer 0..=1000000 requests/s",
        "— (required)",
        "tenants.md",
    ),
    (
        "[shares.tenants.<name>]",
        "burst",
        "integer 0..=1000000",
        "`0`",
        "tenants.md",
    ),
    (
        "[quarantine]",
        "faults",
        "integer 0..=1000000",
        "`5`",
        "tenants.md",
    ),
    (
        "[quarantine]",
        "window_ms",
        "integer 1..=86400000 ms",
        "`30000`",
        "tenants.md",
    ),
    (
        "[quarantine]",
        "cooldown_ms",
        "integer 1..=86400000 ms",
        "`30000`",
        "tenants.md",
    ),
    (
        "[decision_log]",
        "sink",
        "`\"off\"` \\| `\"stdout\"` \\| `\"file\"` \\| `\"http\"`",
        "`\"off\"`",
        "decision-log.md",
    ),
    ("[decision_log]", "path", "string", "—", "decision-log.md"),
    ("[decision_log]", "url", "string", "—", "decision-log.md"),
    (
        "[decision_log]",
        "include",
        "array of `args`, `content`, `state`",
        "`[]`",
        "decision-log.md",
    ),
    (
        "[decision_log]",
        "mask",
        "array of paths",
        "`[]`",
        "decision-log.md",
    ),
];

/// Every row, table by table in the order a manifest is read.
fn rows() -> Vec<Row> {
    let own = |table: &'static str| {
        OWN_KEYS
            .iter()
            .filter(move |r| r.0 == table)
            .map(|&(t, k, ty, d, p)| {
                (
                    t.to_string(),
                    k.to_string(),
                    ty.to_string(),
                    d.to_string(),
                    p,
                )
            })
    };
    let defaults: Vec<_> = Limits::default().written().collect();
    let limits: Vec<(&str, String)> = crate::limit_keys!(limit_rows);
    let limit = |table: &'static str, page: &'static str| {
        limits.iter().zip(&defaults).map(move |((k, ty), (_, d))| {
            (
                table.to_string(),
                k.to_string(),
                ty.clone(),
                format!("`{d}`"),
                page,
            )
        })
    };
    let mut rows: Vec<Row> = Vec::new();
    rows.extend(own("[[plugin]]"));
    rows.extend(limit("[[plugin]]", "plugins.md"));
    rows.extend(own("[defaults]"));
    rows.extend(limit("[defaults]", "plugins.md"));
    rows.extend(limit("[ceilings]", "tenants.md"));
    rows.extend(own("[ceilings]"));
    let shares: Vec<(&str, String, String)> = crate::share_keys!(share_rows);
    for (k, ty, d) in shares {
        rows.push(("[shares]".into(), k.into(), ty, d, "tenants.md"));
    }
    rows.extend(own("[shares]"));
    rows.extend(own("[shares.tenants.<name>]"));
    rows.extend(own("[quarantine]"));
    rows.extend(own("[decision_log]"));
    let numbers: Vec<(&str, String, String)> = crate::decision_log_keys!(decision_log_rows);
    for (k, ty, d) in numbers {
        rows.push(("[decision_log]".into(), k.into(), ty, d, "decision-log.md"));
    }
    rows
}

/// docs/manifest-keys.md as generated.
fn markdown() -> String {
    let mut out = String::from(
        "# Every manifest key\n\n\
         Every key a `toolgate.toml` may set, table by table, with its type, its\n\
         default and the page that explains it ([contents](README.md)). Generated\n\
         from the tables that declare the keys (`host/src/load/manifest/key_index.rs`);\n\
         regenerate with `TOOLGATE_BLESS=1 cargo test -p toolgate --lib -- key_index`.\n\
         `[ceilings]`, `[shares]`, `[quarantine]` and `[decision_log]` are the\n\
         operator's: allowed only in the global manifest.\n\n\
         | table | key | type | default | page |\n|---|---|---|---|---|\n",
    );
    for (table, key, ty, default, page) in rows() {
        let _ = writeln!(
            out,
            "| `{table}` | `{key}` | {ty} | {default} | [{page}]({page}) |"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    /// docs/manifest-keys.md is the index the tables generate;
    /// `TOOLGATE_BLESS=1` writes it.
    #[test]
    fn the_manifest_key_index_is_generated() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/manifest-keys.md");
        let generated = super::markdown();
        let doc = std::fs::read_to_string(&path).unwrap_or_default();
        if std::env::var_os("TOOLGATE_BLESS").is_some() && doc != generated {
            std::fs::write(&path, &generated).expect("write docs/manifest-keys.md");
            return;
        }
        assert!(
            doc == generated,
            "docs/manifest-keys.md differs from the index host/src/load/manifest/key_index.rs \
             generates; regenerate it with `TOOLGATE_BLESS=1 cargo test -p toolgate --lib -- key_index`"
        );
    }

    /// The index lists, for each table, exactly the keys the manifest
    /// takes there: those its refusal of an unknown key names.
    #[test]
    fn the_index_has_every_key_each_table_takes_and_no_other() {
        use std::collections::BTreeSet;

        use crate::load::manifest::{Manifest, Scope};
        let tables = [
            ("[[plugin]]", "[[plugin]]"),
            ("[defaults]", "[defaults]"),
            ("[ceilings]", "[ceilings]"),
            ("[shares]", "[shares]"),
            ("[shares.tenants.<name>]", "[shares.tenants.acme]"),
            ("[quarantine]", "[quarantine]"),
            ("[decision_log]", "[decision_log]"),
        ];
        let rows = super::rows();
        for (table, header) in tables {
            let text = format!("{header}\nno_such_key = 1\n");
            let e = Manifest::parse(
                std::path::Path::new("toolgate.toml"),
                &text,
                Scope::Global,
                1 << 30,
            )
            .expect_err("an unknown key");
            // serde's words: "expected `a`", "`a` or `b`", "one of `a`, `b`, ...".
            let (_, expected) = e
                .message
                .split_once("expected ")
                .unwrap_or_else(|| panic!("{table}: {}", e.message));
            let expected = expected.trim_start_matches("one of ");
            let takes: BTreeSet<&str> = expected
                .split(", ")
                .flat_map(|k| k.split(" or "))
                .map(|k| k.trim().trim_matches('`'))
                .collect();
            let indexed: BTreeSet<&str> = rows
                .iter()
                .filter(|r| r.0 == table)
                .map(|r| r.1.as_str())
                .collect();
            assert_eq!(indexed, takes, "{table}");
        }
    }
}
