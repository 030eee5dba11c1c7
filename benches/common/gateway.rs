//! An `archivist serve --api` process for the benchmarks: started on a free loopback port
//! with plain HTTP, waited for (`/readyz`), with researcher tokens from `archivist token
//! create`, killed when dropped.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running gateway.
pub(crate) struct Process {
    child: Child,
    addr: SocketAddr,
    url: String,
    bin: PathBuf,
    store_url: String,
}

impl Process {
    /// `bin serve --api` on the datastore at `store_url` and the bus at `bus_url` (the same
    /// database, or the bus's own), logging at `log`; returns once `/readyz` answers 200.
    pub(crate) fn start(bin: &Path, store_url: &str, bus_url: &str, log: &str) -> Process {
        // A free port: taken, read, let go (another process could take it in between; this
        // is a benchmark on a quiet loopback).
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut command = Command::new(bin);
        command
            .args(["serve", "--api", "--addr", &addr.to_string()])
            .env("DATABASE_URL", store_url)
            .env("RUST_LOG", log)
            .stdout(Stdio::null());
        if bus_url != store_url {
            command.env("ARCHIVIST_BUS_URL", bus_url);
        }
        let mut process = Process {
            child: command.spawn().unwrap(),
            addr,
            url: format!("http://{addr}"),
            bin: bin.to_path_buf(),
            store_url: store_url.to_string(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if matches!(request(addr, "GET", "/readyz", None), Some((200, _))) {
                return process;
            }
            if let Ok(Some(status)) = process.child.try_wait() {
                panic!("serve --api ended before it was ready: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "serve --api not ready within a minute"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A new researcher token named `name` (`archivist token create`).
    pub(crate) fn token(&self, name: &str) -> String {
        let out = Command::new(&self.bin)
            .args(["token", "create", "--scope", "researcher", "--name", name])
            .env("DATABASE_URL", &self.store_url)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "token create: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// `http://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The HTTP/1.1 request `method path` with no body (and a bearer token), the connection
/// closed after it: the answer's status and body, or `None` when nothing answered.
pub(crate) fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    stream
        .write_all(head(addr, method, path, token).as_bytes())
        .ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).ok()?;
    parse(&answer)
}

/// A request head without a body, `Connection: close`.
pub(crate) fn head(addr: SocketAddr, method: &str, path: &str, token: Option<&str>) -> String {
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Length: 0\r\n\
         Connection: close\r\n\r\n"
    )
}

/// The status and body of a whole answer.
pub(crate) fn parse(answer: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(answer);
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map_or_else(String::new, |(_, b)| b.to_string());
    Some((status, body))
}

/// A process's resident memory now (`VmRSS`) and at its peak (`VmHWM`), in bytes.
pub(crate) fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// A process's open file descriptors, and how many of them are sockets.
pub(crate) fn open_files(pid: u32) -> (usize, usize) {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return (0, 0);
    };
    let mut all = 0;
    let mut sockets = 0;
    for e in entries.flatten() {
        all += 1;
        if std::fs::read_link(e.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
        {
            sockets += 1;
        }
    }
    (all, sockets)
}
