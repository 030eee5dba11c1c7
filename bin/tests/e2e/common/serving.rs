//! A long-running subcommand that serves HTTP (`serve`, `run --metrics-addr`), and plain
//! HTTP/1.1 requests to it: what `metrics.rs` and `status_page.rs` share.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::pipeline::Scenario;

/// Kills the child when the test ends, passed or not.
pub(crate) struct Running(pub(crate) Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a long-running subcommand on the scenario's bus and returns it with the address its
/// log names (`… on http://ADDR`), waiting at most `deadline` for that line.
pub(crate) fn start_serving(
    s: &Scenario,
    args: &[&str],
    extra: &[(&str, &str)],
    deadline: Duration,
) -> (Running, String) {
    start_serving_in(s.path(), args, &s.bus.with(extra), deadline)
}

/// [`start_serving`] in `dir` with the environment `env` (a world other than a [`Scenario`]).
pub(crate) fn start_serving_in(
    dir: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
    deadline: Duration,
) -> (Running, String) {
    let mut child = super::command(dir, args, env)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let running = Running(child);
    // The reader keeps draining so the pipe never fills.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let named = line
                .split_once("on http://")
                .or_else(|| line.split_once("on https://"));
            if let Some((_, rest)) = named {
                let _ = tx.send(rest.trim().to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(deadline)
        .unwrap_or_else(|_| panic!("`archivist {args:?}` never said where it serves"));
    (running, addr)
}

/// One HTTP/1.1 request: the status code and the body.
pub(crate) fn request(addr: &str, method: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let code = head.split(' ').nth(1).unwrap().parse().unwrap();
    (code, body.to_string())
}

/// One GET: the status code and the body.
pub(crate) fn get(addr: &str, path: &str) -> (u16, String) {
    request(addr, "GET", path)
}

/// A served page made measurable: its HTML fetched from `addr`, with a `<base>` so that its
/// stylesheet loads from the server, and `script` (the body of a JavaScript function returning
/// what it measured) run once the page is laid out, its answer written as JSON into
/// `<pre id="measured">`. Written to a file in `dir`, whose `file://` URL is returned: a
/// browser's `--dump-dom` of it then holds what was drawn (see [`measured`]).
#[allow(dead_code)]
pub(crate) fn measurable(addr: &str, path: &str, script: &str, dir: &std::path::Path) -> String {
    let (code, html) = get(addr, path);
    assert_eq!(code, 200, "{path}: {html}");
    let html = html.replacen(
        "<head>",
        &format!("<head><base href=\"http://{addr}/\">"),
        1,
    );
    let probe = format!(
        "<script>(function(){{var out=document.createElement('pre');out.id='measured';\
         out.textContent=JSON.stringify((function(){{{script}}})());\
         document.body.appendChild(out);}})();</script></body>"
    );
    let html = html.replacen("</body>", &probe, 1);
    let file = dir.join(format!(
        "measure-{}.html",
        path.replace(['/', '?', '&', '='], "_")
    ));
    std::fs::write(&file, html).unwrap();
    format!("file://{}", file.display())
}

/// What the script of [`measurable`] wrote, read back from the browser's `--dump-dom`.
#[allow(dead_code)]
pub(crate) fn measured(dom: &str) -> serde_json::Value {
    let start = dom
        .find("<pre id=\"measured\">")
        .unwrap_or_else(|| panic!("the page was not measured: {dom}"))
        + "<pre id=\"measured\">".len();
    let text = &dom[start..];
    let text = &text[..text.find("</pre>").unwrap()];
    let json = text
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&");
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"))
}
