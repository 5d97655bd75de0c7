//! A real OCI registry on a loopback port, started by the tests that need
//! one: Debian's `docker-registry` package (the CNCF distribution
//! registry; `.ci/run` installs it), storing in a temporary directory. A
//! machine without it fails those tests, saying so: none passes silently.
//!
//! The registry runs under a shell that kills it when its standard input
//! closes, so it goes with the test process however that ends.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

/// The registry's program.
const PROGRAM: &str = "docker-registry";

/// One registry; its storage survives [`OciRegistry::stop`].
pub struct OciRegistry {
    port: u16,
    dir: tempfile::TempDir,
    running: Option<(Child, ChildStdin)>,
}

impl OciRegistry {
    /// A new registry on a free loopback port, answering once this returns.
    pub fn start() -> OciRegistry {
        // Not an ephemeral port: no other test's listener can take it
        // before the registry binds it.
        let port = crate::file_server::FileServer::free_port();
        let dir = tempfile::tempdir().expect("tempdir");
        let mut registry = OciRegistry {
            port,
            dir,
            running: None,
        };
        registry.restart();
        registry
    }

    /// `127.0.0.1:PORT`, as a reference names the registry.
    pub fn authority(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Stops the registry (what it stores is kept).
    pub fn stop(&mut self) {
        if let Some((mut child, stdin)) = self.running.take() {
            drop(stdin);
            let _ = child.wait();
        }
    }

    /// Starts the registry again on its port, with what it stored.
    pub fn restart(&mut self) {
        self.stop();
        match Command::new(PROGRAM).arg("--version").output() {
            Ok(out) if out.status.success() => {}
            _ => panic!(
                "docker-registry is not installed: the OCI plugin source tests need a real \
                 registry (Debian: apt-get install docker-registry; .ci/run installs it)"
            ),
        }
        let config = self.config_path();
        let storage = self.dir.path().join("storage");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: 127.0.0.1:{}\n",
                storage.display(),
                self.port
            ),
        )
        .expect("write the registry's config");
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#""$0" serve "$1" >/dev/null 2>&1 & pid=$!; read _; kill $pid; wait $pid"#)
            .arg(PROGRAM)
            .arg(&config)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("start docker-registry");
        let stdin = child.stdin.take().expect("stdin");
        self.running = Some((child, stdin));
        for _ in 0..400 {
            if self.answers() {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!(
            "docker-registry on port {} did not answer GET /v2/",
            self.port
        );
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("config.yml")
    }

    /// Whether `GET /v2/` answers 200.
    fn answers(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let request = format!(
            "GET /v2/ HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            self.port
        );
        if s.write_all(request.as_bytes()).is_err() {
            return false;
        }
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).unwrap_or(0);
        buf[..n].starts_with(b"HTTP/1.1 200")
    }
}

impl Drop for OciRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}
