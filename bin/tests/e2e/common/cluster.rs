//! A Postgres cluster of a test's own (initdb in a temporary directory), stopped on drop;
//! optionally with TLS on, its certificate signed by a certificate authority made for it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A throwaway cluster listening on 127.0.0.1 on a free port.
pub(crate) struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    pub(crate) port: u16,
}

/// `cmd` in a shell, as the postgres user when running as root (initdb refuses root).
pub(crate) fn as_postgres(cmd: &str) -> Command {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if root {
        let mut c = Command::new("su");
        c.args(["postgres", "-s", "/bin/sh", "-c", cmd]);
        c
    } else {
        let mut c = Command::new("sh");
        c.args(["-c", cmd]);
        c
    }
}

fn run(cmd: &str) {
    let ok = as_postgres(cmd).status().unwrap();
    assert!(ok.success(), "failed: {cmd}");
}

/// The directory of initdb and pg_ctl: the newest /usr/lib/postgresql/*/bin, else the PATH's.
fn postgres_bin() -> PathBuf {
    std::fs::read_dir("/usr/lib/postgresql")
        .ok()
        .and_then(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .filter(|p| p.join("initdb").exists())
                .max()
        })
        .or_else(|| {
            let out = Command::new("sh")
                .args(["-c", "command -v initdb"])
                .output()
                .ok()?;
            let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            path.parent().map(Path::to_path_buf)
        })
        .filter(|p| p.join("initdb").exists())
        .expect("no initdb: run scripts/test.sh, which installs PostgreSQL")
}

impl Cluster {
    /// A cluster without TLS, started.
    pub(crate) fn start() -> Self {
        let c = Self::init();
        c.pg_ctl_start("");
        c
    }

    /// A cluster that takes TLS connections only (every other one is rejected), with a
    /// certificate for 127.0.0.1 and localhost signed by a new certificate authority, whose
    /// certificate is [`Cluster::ca_file`].
    pub(crate) fn start_tls_only() -> Self {
        let c = Self::init();
        let d = c.dir.path().display();
        run(&format!(
            "cd {d} && openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=archivist-test-ca \
             -keyout ca.key -out ca.crt 2>/dev/null \
             && openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout server.key \
             -out server.csr 2>/dev/null \
             && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext \
             && openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
             -days 2 -extfile san.ext -out server.crt 2>/dev/null \
             && chmod 600 server.key \
             && printf 'local all all trust\\nhostssl all all 127.0.0.1/32 trust\\nhostnossl all all 127.0.0.1/32 reject\\n' > data/pg_hba.conf"
        ));
        c.pg_ctl_start(&format!(
            "-c ssl=on -c ssl_cert_file={d}/server.crt -c ssl_key_file={d}/server.key"
        ));
        c
    }

    fn init() -> Self {
        let bin = postgres_bin();
        let dir = tempfile::tempdir().unwrap();
        let _ = Command::new("chown")
            .args(["postgres", dir.path().to_str().unwrap()])
            .status();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let c = Cluster { dir, bin, port };
        run(&format!(
            "{}/initdb -D {}/data -U postgres -A trust >/dev/null",
            c.bin.display(),
            c.dir.path().display()
        ));
        c
    }

    fn pg_ctl_start(&self, options: &str) {
        let d = self.dir.path().display();
        run(&format!(
            "{}/pg_ctl -D {d}/data -o '-p {} -k {d} -c listen_addresses=127.0.0.1 {options}' -l {d}/log -w start >/dev/null",
            self.bin.display(),
            self.port
        ));
    }

    /// Stops the server at once, as a crash would (`pg_ctl -m immediate`).
    pub(crate) fn crash(&self) {
        run(&format!(
            "{}/pg_ctl -D {}/data -m immediate -w stop >/dev/null",
            self.bin.display(),
            self.dir.path().display()
        ));
    }

    /// Starts a cluster made by [`Cluster::start`] again after [`Cluster::crash`].
    pub(crate) fn start_again(&self) {
        self.pg_ctl_start("");
    }

    /// The certificate authority's certificate (TLS clusters).
    pub(crate) fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// The `postgres` database as the `postgres` user.
    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = as_postgres(&format!(
            "{}/pg_ctl -D {}/data -m immediate stop >/dev/null 2>&1",
            self.bin.display(),
            self.dir.path().display()
        ))
        .status();
    }
}
