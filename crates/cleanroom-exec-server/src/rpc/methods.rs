//! The handlers of `environment/*`, `process/*`, `fs/*` and `http/request` (spec §4–6): params
//! in, result out.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{json, Value};

use super::{Call, Reply, Shared};
use crate::process::start::{self, EnvContext};
use crate::protocol::{Params, RpcError};

/// `environment/info`.
pub async fn environment_info(c: Call) -> Result<Value, RpcError> {
    Ok(c.shared.env.info())
}

/// `environment/status`.
pub async fn environment_status(_: Call) -> Result<Value, RpcError> {
    Ok(json!({"status": "ready"}))
}

/// `process/start`: the pumps start once the result is queued. A managed `sandbox` is resolved
/// and compiled on the blocking pool (its globs walk directories, its cover lists them), not on
/// the server's one runtime thread, and so is the environment's protection, compiled afresh for
/// a process without one; the connection still waits for it, so requests stay in order.
pub async fn start(c: Call) -> Reply {
    let shared = &c.shared;
    let managed = c.params.get("sandbox").is_some_and(|s| !s.is_null());
    let validated = if managed || shared.env.protection().sandbox().is_some() {
        let (shared, params) = (shared.clone(), c.params.clone());
        tokio::task::spawn_blocking(move || {
            start::validate(&params, &env_context(&shared, managed)?)
        })
        .await
        .unwrap_or_else(|e| Err(RpcError::internal(format!("validation failed: {e}"))))
    } else {
        env_context(shared, managed).and_then(|ctx| start::validate(&c.params, &ctx))
    };
    let started = validated.and_then(|spec| {
        c.session
            .start(&spec, &shared.env, &shared.reaper, shared.max_processes)
            .map(|(process, started)| (spec, process, started))
    });
    match started {
        Err(e) => Err(e).into(),
        Ok((spec, process, started)) => {
            let result = json!({"processId": spec.process_id, "sandboxType": spec.confinement.sandbox_type()});
            let reaper = shared.reaper.clone();
            let session = c.session.clone();
            Reply {
                result: Ok(result),
                then: Some(Box::new(move || {
                    process.begin(started, reaper);
                    session.forget_later(&process);
                })),
            }
        }
    }
}

/// What validating a start needs from the server: for a `managed` start (a `sandbox` of its
/// own), the protection's rules resolved now, which its policy is intersected with.
fn env_context(shared: &Shared, managed: bool) -> Result<EnvContext<'_>, RpcError> {
    let policy = match managed {
        true => shared.env.policy_base()?,
        false => shared.env.policy_base_unmanaged()?,
    };
    Ok(EnvContext {
        base: shared.env.base(),
        allow_secret_env: shared.allow_secret_env,
        run_id: shared.env.run_id(),
        policy,
        protection: Some(shared.env.protection()),
    })
}

/// An `fs/*` method on an open handle (`fs/readBlock`, `fs/close`): the policy it was opened
/// under governs it, so nothing is resolved for it.
pub async fn fs_handle(method: &'static str, c: Call) -> Result<Value, RpcError> {
    crate::fs::on_handle(method, &c.params, c.session.fs()).await
}

/// An `fs/*` method on a path (see [`crate::fs`]); the environment's rules are resolved for
/// each call.
pub async fn fs(method: &'static str, c: Call) -> Result<Value, RpcError> {
    let base = c.shared.env.policy_base()?;
    let cx = crate::fs::Context {
        base: &base,
        environment: c.shared.env.protection().sandbox(),
        handles: c.session.fs(),
        reaper: &c.shared.reaper,
    };
    crate::fs::call(method, &c.params, &cx).await
}

/// `http/request`: a streamed body follows the result (see [`crate::http`]); later requests
/// go on while it waits for the network.
pub async fn http(c: Call) -> Reply {
    match c.unless_ready(crate::http::call(&c.params)).await {
        Err(e) => Err(e).into(),
        Ok(reply) => Reply {
            result: Ok(reply.result),
            then: reply.stream.map(|stream| {
                let outlet = c.session.outlet().clone();
                Box::new(move || drop(tokio::spawn(stream.run(outlet)))) as Box<dyn FnOnce() + Send>
            }),
        },
    }
}

/// `process/read`.
pub async fn read(c: Call) -> Result<Value, RpcError> {
    let p = Params::new(&c.params)?;
    let id = p.string("processId")?;
    let after = p.opt_u64("afterSeq")?.unwrap_or(0);
    let max_bytes = p.opt_u64("maxBytes")?;
    let wait = Duration::from_millis(p.opt_u64("waitMs")?.unwrap_or(0));
    let process = c
        .session
        .process(id)
        .ok_or_else(|| RpcError::invalid_request(format!("unknown process id {id}")))?;
    Ok(c.unless_ready(process.read(after, max_bytes, wait)).await)
}

/// `process/write`.
pub async fn write(c: Call) -> Result<Value, RpcError> {
    let p = Params::new(&c.params)?;
    let id = p.string("processId")?;
    let chunk = p.string("chunk")?;
    let data = BASE64
        .decode(chunk)
        .map_err(|e| RpcError::invalid_params(format!("chunk must be base64: {e}")))?;
    let write_id = p.opt_string("writeId")?;
    let status = match c.session.process(id) {
        None => "unknownProcess",
        Some(process) => c.unless_ready(process.write(&data, write_id)).await,
    };
    Ok(json!({"status": status}))
}

/// `process/signal` (`interrupt` only).
pub async fn signal(c: Call) -> Result<Value, RpcError> {
    let p = Params::new(&c.params)?;
    let id = p.string("processId")?;
    match p.string("signal")? {
        "interrupt" => {}
        other => {
            return Err(RpcError::invalid_params(format!(
                "signal {other:?} is not supported; the only signal is \"interrupt\""
            )))
        }
    }
    if let Some(process) = c.session.process(id) {
        process.interrupt()?;
    }
    Ok(json!({}))
}

/// `process/terminate`: `{running}`, after the tree is reaped and before `exited`.
pub async fn terminate(c: Call) -> Reply {
    let process = match Params::new(&c.params).and_then(|p| p.string("processId")) {
        Err(e) => return Err(e).into(),
        Ok(id) => c.session.process(id),
    };
    let Some(process) = process else {
        return Ok(json!({"running": false})).into();
    };
    let hold = process.hold_exit();
    let result = c
        .unless_ready(process.terminate(&c.shared.reaper))
        .await
        .map(|running| json!({"running": running}));
    Reply {
        result,
        then: Some(Box::new(move || drop(hold))),
    }
}
