//! The Postgres server: fresh databases per measurement, and an optional throwaway cluster.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Executor, PgPool};

pub struct Server {
    admin: PgPool,
    admin_url: String,
}

impl Server {
    pub async fn connect(admin_url: &str) -> Result<Server> {
        let admin = PgPoolOptions::new()
            .max_connections(2)
            .connect(admin_url)
            .await
            .with_context(|| format!("connecting to {admin_url}"))?;
        Ok(Server {
            admin,
            admin_url: admin_url.to_string(),
        })
    }

    /// Server version and the settings that matter here.
    pub async fn describe(&self) -> Result<String> {
        let mut parts = Vec::new();
        let v: String = sqlx::query_scalar("SHOW server_version")
            .fetch_one(&self.admin)
            .await?;
        parts.push(format!("PostgreSQL {v}"));
        for name in [
            "autovacuum",
            "synchronous_commit",
            "fsync",
            "shared_buffers",
        ] {
            let v: String = sqlx::query_scalar(&format!("SHOW {name}"))
                .fetch_one(&self.admin)
                .await?;
            parts.push(format!("{name}={v}"));
        }
        Ok(parts.join(", "))
    }

    /// Drops (if left over) and creates `bus_bench_<name>`; returns its URL.
    pub async fn fresh_db(&self, name: &str) -> Result<String> {
        let db = format!("bus_bench_{name}");
        self.drop_db(name).await?;
        self.admin
            .execute(format!("CREATE DATABASE {db}").as_str())
            .await
            .with_context(|| format!("creating {db}"))?;
        Ok(self.url_of(&db))
    }

    pub async fn drop_db(&self, name: &str) -> Result<()> {
        let db = format!("bus_bench_{name}");
        self.admin
            .execute(format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)").as_str())
            .await
            .with_context(|| format!("dropping {db}"))?;
        Ok(())
    }

    fn url_of(&self, db: &str) -> String {
        // Replace the path of the admin URL (…/test?x → …/db?x).
        let (base, query) = match self.admin_url.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (self.admin_url.as_str(), None),
        };
        let base = match base.rfind('/') {
            Some(i) if i > "postgres://".len() => &base[..i],
            _ => base,
        };
        match query {
            Some(q) => format!("{base}/{db}?{q}"),
            None => format!("{base}/{db}"),
        }
    }
}

/// A cluster made with `initdb` in a temporary directory, PostgreSQL's default settings
/// (autovacuum on), stopped and removed on drop.
pub struct Throwaway {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
}

fn as_postgres(cmd: &str) -> Result<()> {
    let status = if is_root() {
        Command::new("su").args(["postgres", "-c", cmd]).status()?
    } else {
        Command::new("bash").args(["-c", cmd]).status()?
    };
    if !status.success() {
        bail!("{cmd}: {status}");
    }
    Ok(())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

impl Throwaway {
    pub fn start() -> Result<Throwaway> {
        let mut bins: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .context("no /usr/lib/postgresql (install the postgresql package)")?
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("bin"))
            .filter(|p| p.join("initdb").exists())
            .collect();
        bins.sort();
        let bin = bins.pop().context("no initdb under /usr/lib/postgresql")?;
        let dir = std::env::temp_dir().join(format!("bus-bench-pg-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        if is_root() {
            Command::new("chown").arg("postgres").arg(&dir).status()?;
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        drop(listener);
        let (b, d) = (bin.display(), dir.display());
        eprintln!("starting a throwaway PostgreSQL (defaults, autovacuum on) on port {port}");
        as_postgres(&format!(
            "{b}/initdb -D {d}/data -U postgres -A trust >/dev/null"
        ))?;
        as_postgres(&format!(
            "{b}/pg_ctl -D {d}/data -o '-p {port} -k {d} -c listen_addresses=127.0.0.1 -c max_connections=300' -l {d}/log -w start >/dev/null"
        ))?;
        as_postgres(&format!(
            "psql -h 127.0.0.1 -p {port} -U postgres -c 'CREATE DATABASE test' postgres >/dev/null"
        ))?;
        Ok(Throwaway { bin, dir, port })
    }

    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/test", self.port)
    }
}

impl Drop for Throwaway {
    fn drop(&mut self) {
        let _ = as_postgres(&format!(
            "{}/pg_ctl -D {}/data -m fast stop >/dev/null",
            self.bin.display(),
            self.dir.display()
        ));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
