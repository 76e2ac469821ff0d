//! A shell and a core speak the kernel protocol over a Unix socket pair, then a
//! host and a worker open a toolchannel WebSocket over another pair. Every
//! message goes through the generated bindings, so each is validated against
//! its contract in both directions.
#![forbid(unsafe_code)]

use anyhow::Context;
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::net::UnixStream;
use tokio_tungstenite::tungstenite::Message as WsMessage;

// Generated modules are whole protocols; a binary uses only part of them.
#[allow(dead_code)]
mod kernel {
    include!(concat!(env!("OUT_DIR"), "/kernel.rs"));
}
#[allow(dead_code)]
mod toolchannel {
    include!(concat!(env!("OUT_DIR"), "/toolchannel.rs"));
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    kernel_session().await?;
    toolchannel_session().await?;
    Ok(())
}

async fn kernel_session() -> anyhow::Result<()> {
    use kernel::{Channel, Party, types};
    let (a, b) = UnixStream::pair()?;
    let mut shell = kernel::connect(a, Channel::Control, Party::Shell)?;
    let mut core = kernel::connect(b, Channel::Control, Party::Core)?;

    let params: types::HelloParams = serde_json::from_value(json!({
        "protocol_versions": [1], "shell_version": "4.0.0",
        "capabilities": ["audio.output", "permissions"], "locale": "ru"
    }))?;
    let hello = json!({
        "v": 1, "type": "request", "id": "s-0001", "method": kernel::Method::Hello.name(),
        "timestamp": 1756750000.0, "trace_id": "t-0001", "payload": params
    });
    shell.send(&hello).await?;

    let (msg, typed) = core
        .recv_as::<types::Message>()
        .await?
        .context("core: stream ended")?;
    let types::Message::RequestMessage(req) = typed else {
        anyhow::bail!("core expected a request")
    };
    let call = kernel::Call::from_parts(&req.method, Some(serde_json::to_value(&req.payload)?))?;
    println!(
        "core  <- {} {:?} (trace {:?})",
        msg.method.as_deref().unwrap_or("?"),
        call.method(),
        msg.trace
    );

    let result = json!({
        "protocol_versions": [1], "protocol_version": 1, "core_version": "4.0.0",
        "capabilities": ["llm"], "session_id": "3f0c"
    });
    core.send(&json!({
        "v": 1, "type": "response", "id": "c-0001", "correlation_id": "s-0001",
        "timestamp": 1756750000.1, "trace_id": "t-0001", "payload": result
    }))
    .await?;
    let reply = shell.recv().await?.context("shell: stream ended")?;
    let typed = kernel::Reply::from_parts(kernel::Method::Hello, reply.value["payload"].clone())?;
    println!(
        "shell <- response to {} : {:?}",
        reply.method.as_deref().unwrap_or("?"),
        typed
    );

    // The contract refuses what the seed forbids: the core may not send hello.
    let wrong = core.send(&hello).await;
    println!(
        "core  -> hello refused locally: {}",
        wrong
            .map(|_| "sent?!".to_string())
            .unwrap_or_else(|e| e.to_string())
    );
    println!(
        "limits: heartbeat silence {:?}, {} missed pings",
        kernel::limits::HEARTBEAT_SILENCE_SECONDS,
        kernel::limits::MISSED_PINGS_DEAD
    );
    Ok(())
}

async fn toolchannel_session() -> anyhow::Result<()> {
    use toolchannel::{Channel, Method, Party};
    let _ = Method::SamplingCreateMessage;
    let (a, b) = UnixStream::pair()?;
    let subprotocol = "agentfy.worker.v1";
    let host = tokio::spawn(async move { tokio_tungstenite::accept_async(b).await });
    let request = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
        "ws://host.invalid/worker",
    )?;
    let (mut worker, _) = tokio_tungstenite::client_async(request, a).await?;
    let mut host = host.await??;

    // The host speaks first: initialize.
    let c = toolchannel::CONTRACT.wire()?.contract().clone();
    let init = c.methods[Method::Initialize.name()]
        .examples
        .iter()
        .find(|e| e.part == contract::model::Part::Call)
        .context("contract has an initialize example")?
        .message
        .clone();
    host.send(WsMessage::text(serde_json::to_string(&init)?))
        .await?;
    let frame = worker.next().await.context("worker: closed")??;
    let (msg, typed) = toolchannel::decode::<toolchannel::types::JsonRpcMessage>(
        Channel::Ws,
        Party::Host,
        &frame.into_data(),
        None,
    )?;
    println!(
        "worker <- {} over {subprotocol}: {}",
        msg.method.as_deref().unwrap_or("?"),
        matches!(typed, toolchannel::types::JsonRpcMessage::Request(_))
    );

    // A sampling request from the worker is a well-formed message the host must refuse.
    let sampling =
        json!({"jsonrpc": "2.0", "id": 9, "method": "sampling/createMessage", "params": {}});
    let bytes = serde_json::to_vec(&sampling)?;
    match toolchannel::decode::<serde_json::Value>(Channel::Ws, Party::Worker, &bytes, None) {
        Ok((m, _)) => println!(
            "host   <- {} (declared, and always refused)",
            m.method.as_deref().unwrap_or("?")
        ),
        Err(e) => println!("host   <- refused: {e}"),
    }
    let code = toolchannel::ErrorCode::try_from(-32003)?;
    println!(
        "host   -> error {} {:?}",
        code.code(),
        code.symbol().unwrap_or_default()
    );
    worker.close(None).await?;
    Ok(())
}
