//! A real `redis-server` on a loopback port, started by the tests that
//! need one (Debian's `redis-server` package; `.ci/run` installs it). A
//! machine without it fails those tests, saying so: none passes silently.
//!
//! The server runs under a shell that kills it when its standard input
//! closes, so it goes with the test process however that ends.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Databases each server has: one per test that shares it.
const DATABASES: u32 = 512;

/// One server.
pub struct RedisServer {
    port: u16,
    running: Option<(Child, ChildStdin)>,
}

impl RedisServer {
    /// A new server on a free loopback port, answering once this returns.
    pub fn start() -> RedisServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut server = RedisServer {
            port,
            running: None,
        };
        server.restart();
        server
    }

    /// The server every test shares, each in its own database
    /// ([`RedisServer::fresh_url`]).
    pub fn shared() -> &'static RedisServer {
        static SHARED: OnceLock<RedisServer> = OnceLock::new();
        SHARED.get_or_init(RedisServer::start)
    }

    /// The URL of database `db`.
    pub fn url(&self, db: u32) -> String {
        format!("redis://127.0.0.1:{}/{db}", self.port)
    }

    /// The URL of a database no other caller of this server was given.
    pub fn fresh_url(&self) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        let db = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(db < DATABASES, "more tests than databases");
        self.url(db)
    }

    /// Stops the server (its data, kept in memory only, is lost).
    pub fn stop(&mut self) {
        if let Some((mut child, stdin)) = self.running.take() {
            drop(stdin);
            let _ = child.wait();
        }
    }

    /// Starts the server again on its port.
    pub fn restart(&mut self) {
        self.stop();
        let args = [
            "--port".to_string(),
            self.port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--save".into(),
            String::new(),
            "--appendonly".into(),
            "no".into(),
            "--databases".into(),
            DATABASES.to_string(),
        ];
        match Command::new("redis-server").arg("--version").output() {
            Ok(out) if out.status.success() => {}
            _ => panic!(
                "redis-server is not installed: the Redis state tests need a real one \
                 (Debian: apt-get install redis-server; .ci/run installs it)"
            ),
        }
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#"redis-server "$@" >/dev/null & pid=$!; read _; kill $pid; wait $pid"#)
            .arg("sh")
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let stdin = child.stdin.take().expect("stdin");
        self.running = Some((child, stdin));
        for _ in 0..400 {
            if self.command("PING").is_some_and(|r| r.starts_with("+PONG")) {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("redis-server on port {} did not answer PING", self.port);
    }

    /// Sends one inline command; its first reply line (`None`: no server).
    pub fn command(&self, line: &str) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(format!("{line}\r\n").as_bytes()).ok()?;
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
