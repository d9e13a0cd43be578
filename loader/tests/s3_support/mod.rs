//! A real S3 API on localhost for the remote-data tests: moto's server, found through
//! `STOKER_MOTO_SERVER` or on PATH, started on a free port, waited for until it
//! answers, and killed when dropped (or when the test process dies: it runs under a
//! shell that kills it as soon as its stdin, held by the test, closes).
//!
//! Where moto is not installed the tests print `SKIPPED: moto_server not found (...)`
//! and pass, unless `STOKER_REQUIRE_S3=1` (set by scripts/test.sh), when they fail.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use stoker_loader::storage::RemoteOptions;

pub struct Moto {
    shell: Option<Child>,
    pub port: u16,
    pub endpoint: String,
}

fn find_moto() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("STOKER_MOTO_SERVER") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("STOKER_MOTO_SERVER={} is not a file", p.display()))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("moto_server"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            "set STOKER_MOTO_SERVER or put it on PATH; pip install 'moto[server]'".into()
        })
}

/// None (after printing SKIPPED) when moto is not installed and S3 is not required.
fn moto_or_skip(test: &str) -> Option<PathBuf> {
    match find_moto() {
        Ok(p) => Some(p),
        Err(why) => {
            if std::env::var("STOKER_REQUIRE_S3").is_ok_and(|v| v == "1") {
                panic!("{test}: STOKER_REQUIRE_S3=1 but moto_server not found ({why})");
            }
            println!("SKIPPED: moto_server not found ({why}) [{test}]");
            None
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Moto {
    /// A fresh server for `test`, or None when moto is missing (and not required).
    pub fn start(test: &str) -> Option<Moto> {
        Self::start_env(test, &[])
    }

    /// A server that checks credentials: every request must be signed with a key
    /// that exists (none do, so any key is wrong).
    pub fn start_with_auth(test: &str) -> Option<Moto> {
        Self::start_env(test, &[("INITIAL_NO_AUTH_ACTION_COUNT", "0")])
    }

    fn start_env(test: &str, env: &[(&str, &str)]) -> Option<Moto> {
        let moto = moto_or_skip(test)?;
        let port = free_port();
        let log = std::env::temp_dir().join(format!("stoker-moto-{port}.log"));
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#""$0" -H 127.0.0.1 -p "$1" >"$2" 2>&1 & pid=$!; read _; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null; exit 0"#)
            .arg(&moto)
            .arg(port.to_string())
            .arg(&log)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let shell = cmd.spawn().expect("start moto_server under sh");
        let mut m = Moto {
            shell: Some(shell),
            port,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let t0 = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if t0.elapsed() > Duration::from_secs(60) {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                m.kill();
                panic!("moto_server did not answer on port {port} within 60 s:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(m)
    }

    /// Settings that point the store at this server, with short timeouts and few
    /// retries so that failures show quickly.
    pub fn options(&self) -> RemoteOptions {
        let mut o = RemoteOptions {
            retries: 2,
            timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(1),
            backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(200),
            retry_timeout: Duration::from_secs(10),
            throttle: Duration::ZERO,
            settings: Default::default(),
        };
        for (k, v) in [
            ("aws_endpoint", self.endpoint.as_str()),
            ("aws_access_key_id", "testing"),
            ("aws_secret_access_key", "testing"),
            ("aws_region", "us-east-1"),
            ("aws_allow_http", "true"),
        ] {
            o.settings.insert(k.into(), v.into());
        }
        o
    }

    /// The same settings as environment variables, for the CLIs.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "testing".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("STOKER_IO_RETRIES", "2".into()),
            ("STOKER_IO_BACKOFF_MS", "50".into()),
        ]
    }

    /// Creates a bucket (an unsigned PUT: this server does not check credentials).
    pub fn create_bucket(&self, name: &str) {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to moto");
        write!(
            s,
            "PUT /{name} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        )
        .unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        assert!(
            reply.starts_with("HTTP/1.1 200") || reply.starts_with("HTTP/1.0 200"),
            "{reply}"
        );
    }

    /// The server's process (a child of the shell that watches it), where /proc says.
    pub fn server_pid(&self) -> Option<u32> {
        let shell = self.shell.as_ref()?.id();
        let text = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).ok()?;
        text.split_whitespace().next()?.parse().ok()
    }

    /// Sends `signal` ("STOP": a server that accepts connections and never answers;
    /// "CONT": back to normal) to the server, by its PID. False when that is unknown.
    pub fn signal(&self, signal: &str) -> bool {
        let Some(pid) = self.server_pid() else {
            return false;
        };
        Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Stops the server now (the tests that kill it mid-epoch); waits until it is gone.
    pub fn kill(&mut self) {
        if let Some(mut shell) = self.shell.take() {
            drop(shell.stdin.take());
            let _ = shell.wait();
        }
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.kill();
    }
}
