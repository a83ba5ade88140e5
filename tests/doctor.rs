//! `tollgate doctor` against real gateways: tollgate with the mock model, tollgate in front of a failing or
//! stream-breaking upstream, wrong keys and base URLs, and a gateway that is not tollgate (the fake upstream
//! answering the doctor directly).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::process::Command;

use common::upstream::{FakeUpstream, Fixture, Queued, Reply};
use common::*;
use serde_json::json;

/// Runs `tollgate doctor`: (exit code, stdout, stderr). Proxy variables are removed so requests go straight
/// to the test servers.
fn doctor(base_url: &str, key: &str, model: &str, protocol: &str) -> (i32, String, String) {
    doctor_with(&[
        "--base-url",
        base_url,
        "--key",
        key,
        "--model",
        model,
        "--protocol",
        protocol,
    ])
}

/// Runs `tollgate doctor ARGS…` (see [`doctor`]).
fn doctor_with(args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(bin());
    cmd.arg("doctor").args(args);
    for v in [
        "ALL_PROXY",
        "all_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
    ] {
        cmd.env_remove(v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const BEGIN: &str = "-----BEGIN TOLLGATE DOCTOR REPORT-----";
const END: &str = "-----END TOLLGATE DOCTOR REPORT-----";

/// The support report: the text between the markers.
fn report(out: &str) -> &str {
    let a = out.find(BEGIN).expect("a support report") + BEGIN.len();
    let b = out.find(END).expect("the report's end marker");
    &out[a..b]
}

/// The `cause` lines of the step output.
fn causes(out: &str) -> Vec<&str> {
    out.lines()
        .filter_map(|l| l.trim_start().strip_prefix("cause"))
        .map(str::trim)
        .collect()
}

/// The block of step `n` (from its `[n/…]` header to the next blank line).
fn step(out: &str, n: usize) -> &str {
    let a = out
        .find(&format!("[{n}/"))
        .unwrap_or_else(|| panic!("no step {n}:\n{out}"));
    let rest = &out[a..];
    &rest[..rest.find("\n\n").unwrap_or(rest.len())]
}

/// Each SDK family with the base URL it takes (OpenAI's with `/v1`, Anthropic's without): every step passes,
/// and the requests go exactly where the official SDKs send them.
#[test]
fn passes_against_tollgate_with_the_mock_model() {
    let gw = Gateway::start_mock("");
    let runs = [
        (format!("http://{}/v1", gw.addr), "chat,responses", 5),
        (format!("http://{}", gw.addr), "messages", 3),
    ];
    for (base, protocols, steps) in &runs {
        let (code, out, err) = doctor(base, &gw.key, "mock", protocols);
        assert_eq!(code, 0, "{base}:\n{out}\n{err}");
        // Step 1 plus two per protocol.
        for n in 1..=*steps {
            assert!(
                step(&out, n).lines().next().unwrap().ends_with("PASS"),
                "{}",
                step(&out, n)
            );
        }
        for n in 2..=*steps {
            let s = step(&out, n);
            assert!(s.contains("status      200 OK"), "{s}");
            assert!(s.contains("request id  req_"), "{s}");
            assert!(s.contains("You said"), "the text received is shown: {s}");
        }
        let r = report(&out);
        assert!(
            r.contains(&format!("Result:         PASS (all {steps} steps passed)")),
            "{r}"
        );
        for field in [
            "Time (UTC):",
            "Time (local):",
            "Client:         tollgate-doctor/",
            "OS:             ",
            "Container:      ",
            "Model:          mock",
            "stream=true",
            "stream=false",
            "request id req_",
            "client request id doctor-",
        ] {
            assert!(r.contains(field), "{field} missing from the report:\n{r}");
        }
        assert_eq!(r.matches("request id req_").count(), steps - 1, "{r}");
        // No key anywhere; no prompt (nor the mock's echo of it) in the report.
        assert!(!out.contains(&gw.key) && !err.contains(&gw.key));
        assert!(!out.contains(&gw.key[3..]));
        assert!(!r.contains("pong"), "{r}");
        assert!(r.contains(&format!("Key:            {}…(43 chars)", &gw.key[..5])));
    }
    let (_, out, _) = doctor(&runs[0].0, &gw.key, "mock", "chat,responses");
    assert!(out.contains("Chat Completions, streaming") && out.contains("Responses, streaming"));
    assert!(out.contains("ended with `data: [DONE]`"));
    assert!(out.contains("ended with `response.completed`"));
    assert!(out.contains(&format!("POST http://{}/v1/chat/completions", gw.addr)));
    let (_, out, _) = doctor(&runs[1].0, &gw.key, "mock", "messages");
    assert!(out.contains("Messages, streaming") && out.contains("ended with `message_stop`"));
    assert!(out.contains(&format!("POST http://{}/v1/messages", gw.addr)));
    // The gateway logged the client request ids, so the operator can find the requests.
    wait_for(
        || gw.all_logs().contains("doctor-"),
        "client request ids in the log",
    );
}

/// One base URL for every protocol (the default, `--protocol all`): each family's base URL is derived from
/// it, so the obvious call passes a healthy gateway (issue 40), and the setup step says which base URL each
/// family's clients take. One family tested alone goes where its client, given that URL, would go: the
/// family it does not suit fails with a cause that says which URL its SDK built and which to give it.
#[test]
fn a_base_url_of_the_other_family_names_the_right_one() {
    let gw = Gateway::start_mock("");
    let (code, out, _) = doctor(&format!("http://{}/v1", gw.addr), &gw.key, "mock", "all");
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("POST http://{}/v1/messages", gw.addr)),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "Anthropic clients (Messages) and Google clients (Gemini API) take `http://{}`",
            gw.addr
        )),
        "{out}"
    );
    for alone in ["messages", "gemini"] {
        let (code, out, _) = doctor(&format!("http://{}/v1", gw.addr), &gw.key, "mock", alone);
        assert_eq!(code, 1, "{out}");
        let c = causes(&out);
        assert_eq!(c.len(), 2, "{out}");
        for cause in c {
            assert!(
                cause.starts_with("404: Anthropic SDKs append `/v1/messages`")
                    || cause.starts_with("404: Google SDKs append `/v1beta/models/"),
                "{cause}"
            );
            assert!(
                cause.contains(&format!("`http://{}` without `/v1`", gw.addr)),
                "{cause}"
            );
        }
    }
    let (code, out, _) = doctor(&format!("http://{}", gw.addr), &gw.key, "mock", "chat");
    assert_eq!(code, 1, "{out}");
    let c = causes(&out);
    assert_eq!(c.len(), 2, "{out}");
    assert!(
        c[0].contains(&format!("Give OpenAI clients `http://{}/v1`", gw.addr)),
        "{}",
        c[0]
    );
}

#[test]
fn a_failing_upstream_is_named_as_the_cause() {
    let fake = FakeUpstream::start(|_| {
        Reply::json(
            500,
            &json!({"error": {"message": "the model server crashed", "type": "server_error"}}),
        )
    });
    let gw = Gateway::start_with_fake(fake.addr, "");
    let (code, out, err) = doctor(
        &format!("http://{}/v1", gw.addr),
        &gw.key,
        "m-chat",
        "chat,responses",
    );
    assert_ne!(code, 0, "{out}\n{err}");
    let c = causes(&out);
    assert_eq!(c.len(), 4, "every request step failed:\n{out}");
    // 500 passed through; a gateway may also answer 502/503 once it stops trying a failing upstream.
    assert!(c[0].starts_with("500:"), "{}", c[0]);
    for cause in &c {
        assert!(cause.starts_with('5'), "{cause}");
        assert!(cause.contains("upstream"), "{cause}");
    }
    let r = report(&out);
    assert!(r.contains("FAIL (4 of 5 steps failed)"), "{r}");
    assert!(
        r.contains("the model server crashed"),
        "the full error: {r}"
    );
    assert!(r.contains("likely cause: 500:"), "{r}");
    assert!(!out.contains(&gw.key));
}

#[test]
fn an_upstream_that_closes_gives_502_naming_the_upstream() {
    let fake = FakeUpstream::start(|_| Reply::Close);
    let gw = Gateway::start_with_fake(fake.addr, "");
    let (code, out, _) = doctor(
        &format!("http://{}", gw.addr),
        &gw.key,
        "m-chat",
        "messages",
    );
    assert_eq!(code, 1, "{out}");
    let c = causes(&out);
    assert_eq!(c.len(), 2, "{out}");
    for cause in c {
        assert!(cause.starts_with("502:"), "{cause}");
        assert!(cause.contains("could not reach its upstream"), "{cause}");
    }
}

#[test]
fn a_wrong_key_names_the_key_and_base_address() {
    let gw = Gateway::start_mock("");
    let wrong = format!("tg_{}", "Q".repeat(40));
    let (code, out, err) = doctor(
        &format!("http://{}/v1", gw.addr),
        &wrong,
        "mock",
        "chat,responses",
    );
    assert_eq!(code, 1, "{out}\n{err}");
    let c = causes(&out);
    assert_eq!(c.len(), 4, "{out}");
    for cause in c {
        assert!(cause.starts_with("401:"), "{cause}");
        assert!(
            cause.contains("key") && cause.contains("base address"),
            "{cause}"
        );
    }
    assert!(!out.contains(&wrong) && !err.contains(&wrong));
    assert!(out.contains("tg_QQ…(43 chars)"));
}

#[test]
fn a_key_pasted_with_bearer_and_a_line_break_is_flagged_but_checked() {
    let gw = Gateway::start_mock("");
    let pasted = format!("Bearer {}\n", gw.key);
    let (code, out, _) = doctor(&format!("http://{}/v1", gw.addr), &pasted, "mock", "chat");
    // The requests pass with the cleaned key, but the form fails step 1.
    assert_eq!(code, 1, "{out}");
    assert!(step(&out, 1).ends_with("FAIL") || step(&out, 1).contains(": FAIL"));
    assert!(step(&out, 1).contains("starts with `Bearer `"), "{out}");
    assert!(step(&out, 1).contains("whitespace"), "{out}");
    assert!(step(&out, 2).contains("PASS"), "{out}");
    assert!(step(&out, 3).contains("PASS"), "{out}");
    assert!(!out.contains(&gw.key));
}

#[test]
fn a_doubled_v1_fails_with_the_path_cause() {
    let gw = Gateway::start_mock("");
    let (code, out, err) = doctor(&format!("http://{}/v1/v1", gw.addr), &gw.key, "mock", "all");
    assert_eq!(code, 1, "{out}\n{err}");
    // The shape check names it and gives the right base URLs...
    let s1 = step(&out, 1);
    assert!(s1.contains("FAIL"), "{s1}");
    assert!(s1.contains("doubled `/v1`"), "{s1}");
    assert!(
        s1.contains(&format!("`http://{}/v1` for OpenAI clients", gw.addr)),
        "{s1}"
    );
    // ...and the requests, sent where such a client would send them, get the 404 path cause.
    assert!(out.contains(&format!("POST http://{}/v1/v1/chat/completions", gw.addr)));
    let c = causes(&out);
    assert_eq!(c.len(), 8, "{out}");
    for cause in c {
        assert!(cause.starts_with("404: wrong path"), "{cause}");
        assert!(cause.contains("doubled `/v1`"), "{cause}");
    }
    let r = report(&out);
    assert!(r.contains("URL and key:    FAIL"), "{r}");
    assert!(r.contains("doubled `/v1`"), "{r}");
}

#[test]
fn credentials_and_queries_in_the_base_url_are_redacted_and_flagged() {
    let gw = Gateway::start_mock("");
    let base = format!("http://alice:hunter22@{}/v1?token=s3cr3t", gw.addr);
    let (code, out, _) = doctor(&base, &gw.key, "mock", "responses");
    assert_eq!(code, 1, "{out}");
    assert!(
        !out.contains("hunter22") && !out.contains("s3cr3t"),
        "{out}"
    );
    assert!(
        out.contains(&format!("http://***@{}/v1?***", gw.addr)),
        "{out}"
    );
    assert!(step(&out, 1).contains("credentials"));
    assert!(step(&out, 1).contains("query string"));
    // Without them, the requests themselves work.
    assert!(step(&out, 2).contains("PASS"), "{out}");
    assert!(step(&out, 3).contains("PASS"), "{out}");
}

#[test]
fn nothing_listening_is_named() {
    // A port that was free a moment ago.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (code, out, _) = doctor(
        &format!("http://127.0.0.1:{port}/v1"),
        "tg_0123456789abcdefghij0123456789abcdefghij",
        "mock",
        "chat",
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        causes(&out)[0].starts_with("nothing accepts connections at http://127.0.0.1:"),
        "{out}"
    );
    assert!(out.contains("request id  none received"), "{out}");
}

/// A Chat upstream that answers non-streaming requests but cuts every stream without `[DONE]`.
fn stream_breaking_upstream() -> FakeUpstream {
    FakeUpstream::start(|rec| {
        if rec.json()["stream"] == true {
            Reply::Sse {
                events: vec![
                    b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"real-chat-model\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"po\"},\"finish_reason\":null}]}\n\n".to_vec(),
                ],
                gate: None,
                abort: true,
            }
        } else {
            Reply::json(
                200,
                &json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000,
                        "model": "real-chat-model",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": "pong"},
                                     "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}}),
            )
        }
    })
}

#[test]
fn a_stream_only_failure_behind_tollgate_names_the_stream_cause() {
    let fake = stream_breaking_upstream();
    let gw = Gateway::start_with_fake(fake.addr, "");
    let (code, out, err) = doctor(&format!("http://{}/v1", gw.addr), &gw.key, "m-chat", "chat");
    assert_eq!(code, 1, "{out}\n{err}");
    let plain = step(&out, 2);
    assert!(
        plain.contains("PASS") && plain.contains("\"pong\""),
        "{plain}"
    );
    let stream = step(&out, 3);
    assert!(stream.contains("FAIL"), "{stream}");
    // tollgate turns the cut into an in-stream error event.
    assert!(stream.contains("error event in the stream"), "{stream}");
    let c = causes(&out);
    assert_eq!(c.len(), 1, "{out}");
    assert!(c[0].starts_with("stream-only failure"), "{}", c[0]);
    assert!(
        c[0].contains("SSE parsing, proxy buffering or idle timeout"),
        "{}",
        c[0]
    );
    let r = report(&out);
    assert!(r.contains("chat       HTTP 200 with text (4 chars)"), "{r}");
    assert!(r.contains("likely cause: stream-only failure"), "{r}");
}

#[test]
fn a_stream_cut_without_its_end_marker_is_a_stream_only_failure() {
    // The fake upstream itself as the gateway: the stream simply stops without `[DONE]`.
    let fake = stream_breaking_upstream();
    let (code, out, _) = doctor(
        &format!("http://{}/v1", fake.addr),
        "sk-test-0123456789abcdef",
        "m",
        "chat",
    );
    assert_eq!(code, 1, "{out}");
    assert!(step(&out, 2).contains("PASS"), "{out}");
    let stream = step(&out, 3);
    assert!(stream.contains("without `data: [DONE]`"), "{stream}");
    assert!(causes(&out)[0].starts_with("stream-only failure"), "{out}");
}

#[test]
fn any_gateway_speaking_the_protocols_passes() {
    // A gateway that is not tollgate: the fake answers each endpoint from the fixtures.
    let fake = FakeUpstream::start(|rec| {
        let dir = match rec.path.as_str() {
            "/v1/chat/completions" => "chat",
            "/v1/responses" => "responses",
            "/v1/messages" => "messages",
            _ => return Reply::json(404, &json!({"error": {"message": "no such path"}})),
        };
        let name = if rec.json()["stream"] == true {
            "stream_text"
        } else {
            "text"
        };
        Fixture::load(&fixtures().join(dir), name).reply()
    });
    let key = "sk-other-gateway-key-0123456789";
    let (code, out, err) = doctor(
        &format!("http://{}/v1", fake.addr),
        key,
        "some-model",
        "chat,responses",
    );
    assert_eq!(code, 0, "{out}\n{err}");
    // No request id headers here: the doctor says so instead of inventing one.
    assert!(out.contains("request id  none received"), "{out}");
    let (code, out, err) = doctor(
        &format!("http://{}", fake.addr),
        key,
        "some-model",
        "messages",
    );
    assert_eq!(code, 0, "{out}\n{err}");

    let reqs = fake.received();
    assert_eq!(reqs.len(), 6);
    for r in &reqs {
        let body = r.json();
        assert_eq!(body["model"], "some-model");
        for field in [
            "tools",
            "reasoning",
            "reasoning_effort",
            "response_format",
            "text",
        ] {
            assert!(body.get(field).is_none(), "{field} in {body}");
        }
        let id = r.header("x-client-request-id").unwrap();
        assert!(id.starts_with("doctor-"), "{id}");
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {key}").as_str())
        );
        if r.path == "/v1/messages" {
            assert_eq!(r.header("x-api-key"), Some(key));
            assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
            assert!(body["max_tokens"].as_u64().unwrap() > 0);
        } else {
            assert!(r.header("x-api-key").is_none());
        }
    }
    // Each request has its own client request id.
    let mut ids: Vec<&str> = reqs
        .iter()
        .map(|r| r.header("x-client-request-id").unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 6);
}

#[test]
fn bad_arguments_exit_2() {
    let (code, _, err) = doctor("http://127.0.0.1:1", "k", "mock", "grpc");
    assert_eq!(code, 2);
    assert!(err.contains("--protocol"), "{err}");
    let (code, _, err) = doctor("http://127.0.0.1:1", "tg_x", " ", "all");
    assert_eq!(code, 2);
    assert!(err.contains("--model"), "{err}");
    let (code, _, err) = doctor("ftp://127.0.0.1:1", "tg_x", "mock", "all");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--base-url"), "{err}");
    let out = Command::new(bin())
        .args([
            "doctor",
            "--base-url",
            "http://127.0.0.1:1",
            "--model",
            "mock",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--key-env"));
    let out = Command::new(bin())
        .args([
            "doctor",
            "--base-url",
            "http://127.0.0.1:1",
            "--model",
            "mock",
        ])
        .args(["--key-env", "TG_DOCTOR_UNSET_KEY_VAR"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TG_DOCTOR_UNSET_KEY_VAR"));
    let out = Command::new(bin())
        .args(["doctor", "--bogus"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown flag is unusable too"
    );
}

/// `--key-env` keeps the key off the command line (where `ps` shows it); a key of the wrong shape is
/// flagged in step 1, before any request.
#[test]
fn the_key_can_come_from_a_variable_and_its_shape_is_checked() {
    let gw = Gateway::start_mock("");
    let base = format!("http://{}/v1", gw.addr);
    let out = Command::new(bin())
        .args([
            "doctor",
            "--base-url",
            &base,
            "--model",
            "mock",
            "--protocol",
            "chat",
        ])
        .args(["--key-env", "TG_DOCTOR_KEY"])
        .env("TG_DOCTOR_KEY", &gw.key)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let cut = &gw.key[..30];
    let (code, out, _) = doctor(&base, cut, "mock", "chat");
    assert_eq!(code, 1, "{out}");
    assert!(
        step(&out, 1).contains("has 30 characters where tollgate keys have 43"),
        "{out}"
    );
}

/// Issue 40: `--json` prints one document a script can read (docs/CLI.md): the setup check, each step with
/// its status, request id and latency, the result and the support report; no key in it.
#[test]
fn doctor_json_is_one_document() {
    let gw = Gateway::start_mock("");
    let mut cmd = Command::new(bin());
    cmd.args([
        "doctor",
        "--base-url",
        &format!("http://{}/v1", gw.addr),
        "--key",
        &gw.key,
        "--model",
        "mock",
        "--json",
    ]);
    for v in [
        "ALL_PROXY",
        "all_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
    ] {
        cmd.env_remove(v);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(text.trim().lines().count(), 1, "one document: {text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["total_steps"], 9);
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 8);
    for s in steps {
        assert_eq!(s["passed"], true, "{s}");
        assert_eq!(s["status"], 200, "{s}");
        assert!(s["request_id"].as_str().unwrap().starts_with("req_"), "{s}");
        assert!(
            s["total_ms"].is_number() && s["protocol"].is_string() && s["stream"].is_boolean(),
            "{s}"
        );
    }
    assert!(v["report"]
        .as_str()
        .unwrap()
        .contains("BEGIN TOLLGATE DOCTOR REPORT"));
    assert!(!text.contains(&gw.key), "the key is never printed");
}

/// `--embed-model` and `--completion-model` add one step each: embeddings of the mock pass; a text
/// completion passes through an OpenAI-compatible upstream and fails, with the gateway's reason, for the mock
/// (which has none).
#[test]
fn embeddings_and_completions_are_probed_when_asked() {
    let up = Queued::start();
    let gw = Gateway::start_every_kind(up.fake.addr, "", "");
    let completion = json!({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "x",
        "choices": [{"text": "pong", "index": 0, "logprobs": null, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 6, "completion_tokens": 1, "total_tokens": 7}});
    up.push(Reply::json(200, &completion));
    let base = format!("http://{}/v1", gw.addr);
    let run = |completion_model: &str| {
        let (code, out, _) = doctor_with(&[
            "--base-url",
            &base,
            "--key",
            &gw.key,
            "--model",
            "mock",
            "--protocol",
            "chat",
            "--embed-model",
            "mock",
            "--completion-model",
            completion_model,
            "--json",
        ]);
        let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
        (Some(code), doc)
    };
    let (code, doc) = run("m-chat");
    assert_eq!(code, Some(0), "{doc}");
    assert_eq!(doc["total_steps"], 5, "{doc}");
    let steps = doc["steps"].as_array().unwrap();
    assert_eq!(steps[2]["endpoint"], "embeddings");
    assert!(
        steps[2]["url"]
            .as_str()
            .unwrap()
            .ends_with("/v1/embeddings"),
        "{}",
        steps[2]
    );
    assert_eq!(steps[2]["text"], "a vector of 256 dimensions");
    assert_eq!(steps[3]["endpoint"], "completions");
    assert_eq!(steps[3]["text"], "pong");
    assert_eq!(up.fake.last().path, "/v1/completions");

    let (code, doc) = run("mock");
    assert_eq!(code, Some(1), "{doc}");
    let step = &doc["steps"][3];
    assert_eq!(step["passed"], false);
    assert_eq!(step["status"], 400);
    assert!(
        step["error"]
            .as_str()
            .unwrap()
            .contains("no text completions endpoint"),
        "{step}"
    );
    let cause = step["cause"].as_str().unwrap();
    assert!(
        cause.contains("Give a model that serves completions"),
        "{step}"
    );
    assert!(
        doc["report"].as_str().unwrap().contains("completions"),
        "{doc}"
    );
}
