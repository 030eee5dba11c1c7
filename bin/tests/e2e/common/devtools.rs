//! Debian's headless Chromium driven over the DevTools protocol, for what a page load from
//! the command line (`--dump-dom`, as `status_page.rs` loads pages) cannot do: keep cookies
//! from one page to the next, fill in a form and send it. The protocol runs over pipes
//! (`--remote-debugging-pipe`: commands on the browser's descriptor 3, answers on 4, each a
//! JSON object ended by a NUL byte); a shell moves the child's standard input and output
//! there, so no unsafe code is needed to hand it descriptors.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long one page may take to load, one form to be sent (a loaded machine).
const DEADLINE: Duration = Duration::from_secs(60);

/// One browser, one tab, one profile (its cookies) for the browser's life.
pub(crate) struct DevTools {
    child: Child,
    commands: ChildStdin,
    answers: mpsc::Receiver<Value>,
    next_id: u64,
    session: String,
    _profile: tempfile::TempDir,
}

impl DevTools {
    /// Starts `chromium` from PATH (missing, the test fails: `scripts/test.sh` installs it)
    /// with a fresh profile and one blank tab.
    pub(crate) fn start() -> Self {
        let binary = std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join("chromium"))
            .find(|p| p.is_file())
            .unwrap_or_else(|| {
                panic!(
                    "no `chromium` on PATH: the pages are tested in a real browser; \
                     scripts/test.sh installs it (apt-get install chromium)"
                )
            });
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>/dev/null"#)
            .arg(&binary)
            .args([
                "--headless",
                // Root in a container has no user namespace for the sandbox.
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--remote-debugging-pipe",
                &format!("--user-data-dir={}", profile.path().display()),
                "about:blank",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let commands = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, answers) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut message = Vec::new();
            while reader.read_until(0, &mut message).unwrap_or(0) > 0 {
                if message.last() == Some(&0) {
                    message.pop();
                }
                if let Ok(value) = serde_json::from_slice::<Value>(&message) {
                    if tx.send(value).is_err() {
                        return;
                    }
                }
                message.clear();
            }
        });
        let mut browser = DevTools {
            child,
            commands,
            answers,
            next_id: 0,
            session: String::new(),
            _profile: profile,
        };
        let target = browser.call(None, "Target.createTarget", json!({"url": "about:blank"}));
        let target = target["targetId"].as_str().unwrap().to_string();
        let attached = browser.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        );
        browser.session = attached["sessionId"].as_str().unwrap().to_string();
        browser
    }

    /// Sends `method` (to the tab with `session`, else to the browser) and waits for its
    /// answer: its `result`, or its `error`.
    fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Result<Value, Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.commands.write_all(&bytes).unwrap();
        self.commands.flush().unwrap();
        let until = Instant::now() + DEADLINE;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let answer = self
                .answers
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("chromium did not answer {method} within {DEADLINE:?}"));
            // Events (no id) and other answers are not waited for.
            if answer["id"] == json!(id) {
                return match answer.get("error") {
                    Some(error) => Err(error.clone()),
                    None => Ok(answer["result"].clone()),
                };
            }
        }
    }

    /// [`send`](Self::send), an error failing the test.
    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.send(session, method, params)
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// The value of `expression` in the tab; `None` while the page cannot run it (between
    /// two documents).
    fn evaluate(&mut self, expression: &str) -> Option<Value> {
        let session = self.session.clone();
        let result = self
            .send(
                Some(&session),
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true}),
            )
            .ok()?;
        if result.get("exceptionDetails").is_some() {
            return None;
        }
        Some(result["result"]["value"].clone())
    }

    /// Waits until the tab shows a document at `path` (its path, without the query) loaded
    /// whole; its address and its markup.
    fn wait_for_path(&mut self, path: &str) -> (String, String) {
        let until = Instant::now() + DEADLINE;
        let check = format!(
            "(location.pathname === {path:?} && document.readyState === 'complete') \
             ? [location.href, document.documentElement.outerHTML] : null"
        );
        loop {
            if let Some(Value::Array(pair)) = self.evaluate(&check) {
                return (
                    pair[0].as_str().unwrap().to_string(),
                    pair[1].as_str().unwrap().to_string(),
                );
            }
            let now = self.evaluate("location.href + ' ' + document.readyState");
            assert!(
                Instant::now() < until,
                "the tab never showed {path} (it is at {now:?})"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Loads `url` in the tab and waits until the page at `path` (where redirects lead) is
    /// loaded whole: its address and markup.
    pub(crate) fn load(&mut self, url: &str, path: &str) -> (String, String) {
        let session = self.session.clone();
        let navigated = self.call(Some(&session), "Page.navigate", json!({"url": url}));
        assert!(navigated.get("errorText").is_none(), "{url}: {navigated}");
        self.wait_for_path(path)
    }

    /// Types `value` into the field `#field` of the page shown, sends its form as a person's
    /// click would, and waits until the page at `path` is loaded: its address and markup.
    pub(crate) fn fill_and_send(
        &mut self,
        field: &str,
        value: &str,
        path: &str,
    ) -> (String, String) {
        let script = format!(
            "(() => {{ const f = document.getElementById({field:?}); f.value = {value:?}; \
             f.form.requestSubmit(); return true; }})()"
        );
        assert_eq!(
            self.evaluate(&script),
            Some(json!(true)),
            "no #{field} to fill in"
        );
        self.wait_for_path(path)
    }
}

impl Drop for DevTools {
    /// Closes the browser (its helper processes go with it), killing it if it does not end.
    fn drop(&mut self) {
        let close = json!({"id": u64::MAX, "method": "Browser.close", "params": {}});
        let mut bytes = serde_json::to_vec(&close).unwrap_or_default();
        bytes.push(0);
        let _ = self.commands.write_all(&bytes);
        let _ = self.commands.flush();
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
