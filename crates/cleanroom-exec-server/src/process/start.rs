//! Validation of `process/start` (spec §5 "process/start").
//!
//! Owns: turning the request's params into a [`Spec`] or a -32602 error that names the field: its
//! environment ([`crate::envpolicy`]) and its confinement ([`crate::policy`]: a managed sandbox
//! is enforced by the kernel, what cannot be enforced is refused, never run unenforced).
//!
//! Invariant: validation is complete before anything is spawned; a request that fails here has no
//! side effect and emits no notification.

use serde_json::Value;

use crate::envpolicy::{self, BaseEnv, EnvPolicy, EXEC_ID_VAR};
use crate::policy::{self, Confinement};
use crate::process::Spec;
use crate::protocol::{self, Params, RpcError};
use crate::uri::parse_file_uri;

/// What validation needs from the environment.
pub struct EnvContext<'a> {
    /// The cleanroom base environment of the server.
    pub base: &'a BaseEnv,
    /// `--allow-secret-env`.
    pub allow_secret_env: bool,
    /// The server's run id (every child carries it, so gc finds orphans of a killed server).
    pub run_id: &'a str,
    /// What a managed process's policy is intersected with (its rules resolved for this start;
    /// none for a start without a `sandbox`, which is confined by `protection` renewed).
    pub policy: policy::Base,
    /// The environment's protection, compiled afresh for a process without a sandbox of its
    /// own (`None`: nothing to renew).
    pub protection: Option<&'a cleanroom::protect::Protection>,
}

/// Why managed network proxies are refused.
const NO_MANAGED_NETWORK: &str =
    "this server has no network proxy; `network: restricted` (loopback only) is enforced instead";

/// Validates `params` into a [`Spec`].
pub fn validate(params: &Value, ctx: &EnvContext<'_>) -> Result<Spec, RpcError> {
    let p = Params::new(params)?;
    let process_id = p.string("processId")?;
    if process_id.is_empty() {
        return Err(RpcError::invalid_params(
            "processId must be a non-empty string",
        ));
    }
    let argv = match p.get("argv") {
        None => {
            return Err(RpcError::invalid_params(
                "argv is required (a non-empty array of strings)",
            ))
        }
        Some(v) => protocol::strings(v, "argv")?,
    };
    if argv.is_empty() {
        return Err(RpcError::invalid_params("argv must not be empty"));
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(RpcError::invalid_params("argv must not contain NUL bytes"));
    }
    let cwd_uri = p
        .opt_string("cwd")
        .map_err(|_| RpcError::invalid_params("process cwd must be a string (a file: URI)"))?
        .ok_or_else(|| RpcError::invalid_params("process cwd is required (a file: URI)"))?;
    // A cwd that does not exist is the spawn's to report (-32603 `spawnNotFound`, as the
    // reference), not a validation error.
    let cwd = parse_file_uri(cwd_uri, "process cwd").map_err(RpcError::invalid_params)?;
    let arg0 = match p.get("arg0") {
        None => None,
        Some(Value::String(s)) if !s.contains('\0') => Some(s.clone()),
        Some(_) => return Err(RpcError::invalid_params("arg0 must be a string or null")),
    };
    let tty = p.bool_or("tty", false)?;
    let pipe_stdin = p.bool_or("pipeStdin", false)?;
    let overlay = envpolicy::parse_overlay(&p)?;
    let policy = EnvPolicy::parse(p.get("envPolicy"))?;
    if p.get("networkProxy").is_some() {
        return Err(RpcError::invalid_params(
            "networkProxy cannot be enforced: network proxy launch is not supported by this server",
        ));
    }
    if p.bool_or("enforceManagedNetwork", false)? || p.get("managedNetwork").is_some() {
        return Err(RpcError::invalid_params(format!(
            "managed network restrictions cannot be enforced: {NO_MANAGED_NETWORK}"
        )));
    }
    let exec_id = new_uuid()?;
    let env = policy.apply(
        ctx.base,
        &overlay,
        ctx.allow_secret_env,
        &[
            (EXEC_ID_VAR, &exec_id),
            (cleanroom::env::RUN_ID_VAR, ctx.run_id),
        ],
    );
    let tmpdir = env
        .get("TMPDIR")
        .map(std::path::PathBuf::from)
        .filter(|t| t.is_absolute())
        .unwrap_or_else(|| ctx.policy.tmpdir.clone());
    let confinement =
        Confinement::for_process(p.get("sandbox"), &cwd, &tmpdir, &ctx.policy, ctx.protection)?;
    Ok(Spec {
        confinement,
        process_id: process_id.to_string(),
        argv,
        arg0,
        cwd,
        env: env.into_iter().collect(),
        exec_id,
        tty,
        pipe_stdin,
    })
}

/// A random (version 4) UUID.
pub fn new_uuid() -> Result<String, RpcError> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b)
        .map_err(|e| RpcError::internal(format!("cannot read random bytes: {e}")))?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut uuid = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            uuid.push('-');
        }
        uuid.push(char::from(HEX[usize::from(byte >> 4)]));
        uuid.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    Ok(uuid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(params: Value) -> Result<Spec, RpcError> {
        let base = BaseEnv {
            all: [("PATH".to_string(), "/usr/bin".to_string())].into(),
            pinned: Default::default(),
        };
        validate(
            &params,
            &EnvContext {
                base: &base,
                allow_secret_env: false,
                run_id: "r",
                policy: crate::policy::Base::default(),
                protection: None,
            },
        )
    }

    fn message(params: Value) -> String {
        let err = check(params).unwrap_err();
        assert_eq!(err.code, protocol::INVALID_PARAMS, "{}", err.message);
        err.message
    }

    #[test]
    fn a_good_start_gets_marks_in_its_environment() {
        let spec = check(json!({"processId":"p","argv":["true"],"cwd":"file:///","env":{},"tty":false,"arg0":null,"envPolicy":{"inherit":"all"}})).unwrap();
        let names: Vec<&str> = spec.env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["CLEANROOM_EXEC_ID", "CLEANROOM_RUN_ID", "PATH"]);
        let groups: Vec<usize> = spec.exec_id.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12], "{}", spec.exec_id);
        assert_eq!(&spec.exec_id[14..15], "4", "version 4: {}", spec.exec_id);
        assert!(spec
            .exec_id
            .bytes()
            .all(|b| b == b'-' || b.is_ascii_hexdigit()));
    }

    #[test]
    fn every_refusal_names_its_field() {
        let ok = json!({"processId":"p","argv":["true"],"cwd":"file:///"});
        let with = |k: &str, v: Value| {
            let mut o = ok.clone();
            o[k] = v;
            o
        };
        assert!(message(with("argv", json!([]))).contains("argv"));
        assert!(message(with("argv", json!("true"))).contains("argv"));
        assert!(message(with("processId", json!(5))).contains("processId"));
        assert!(message(with("cwd", json!("/tmp"))).contains("process cwd"));
        assert!(message(with("tty", json!(1))).contains("tty"));
        assert!(message(with("arg0", json!(3))).contains("arg0"));
        assert!(message(with("networkProxy", json!({}))).contains("cannot be enforced"));
        assert!(message(with("enforceManagedNetwork", json!(true))).contains("cannot be enforced"));
        let unknown = json!({"permissions":{"type":"managed","file_system":{"type":"restricted",
            "entries":[{"access":"none","path":{"type":"special","value":{"kind":"nonesuch"}}}]}}});
        assert!(message(with("sandbox", unknown))
            .starts_with("filesystem sandbox restrictions cannot be enforced"));
        let codex_read_only = json!({"permissions":{"type":"managed","network":"restricted",
            "file_system":{"type":"restricted","entries":[
                {"access":"read","path":{"type":"special","value":{"kind":"root"}}}]}}});
        let spec = check(with("sandbox", codex_read_only)).unwrap();
        assert_eq!(spec.confinement.sandbox_type(), "linuxSeccomp");
        let disabled = json!({"permissions":{"type":"disabled"}});
        assert!(check(with("sandbox", disabled)).is_ok());
    }
}
