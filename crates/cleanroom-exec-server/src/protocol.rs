//! JSON-RPC message shapes and error values of the exec-server protocol (spec §1–2).
//!
//! Owns: turning one inbound frame into a [`Incoming`] (or the error response the spec asks
//! for), building outbound responses and notifications as text, and typed access to request
//! parameters whose errors name the offending field.
//!
//! Invariant: every outbound message carries `"jsonrpc":"2.0"`; an inbound message is accepted
//! with or without it; a message that is not JSON or not an object is answered with `id: null`
//! and never closes the connection; a message with more than [`MAX_VALUES`] JSON values is
//! refused by a scan of its bytes before any value is allocated (20 million tiny array elements
//! would cost hundreds of MiB as `serde_json::Value`s).

use serde_json::{json, Map, Value};

/// Unparseable JSON.
pub const PARSE_ERROR: i64 = -32700;
/// Invalid request, method before `initialize`, duplicate or unknown process, limits reached.
pub const INVALID_REQUEST: i64 = -32600;
/// Unknown method.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid params, including policy refusals.
pub const INVALID_PARAMS: i64 = -32602;
/// Internal failure (spawn failed, kill failed).
pub const INTERNAL_ERROR: i64 = -32603;
/// Resume of a session attached to another connection.
pub const SESSION_ATTACHED: i64 = -32010;

/// Most JSON values (counted as objects, arrays and separators) in one message, as Codex's
/// decoder budget.
pub const MAX_VALUES: usize = 262_144;

/// A JSON-RPC error value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcError {
    /// The spec's code.
    pub code: i64,
    /// A message a person can act on.
    pub message: String,
    /// Machine-readable detail (`{"kind": "spawnNotFound"}`), sent as `error.data`.
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with `code` and `message`.
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// This error with `data: {"kind": kind}`.
    pub fn with_kind(mut self, kind: &str) -> RpcError {
        self.data = Some(json!({ "kind": kind }));
        self
    }

    /// -32600.
    pub fn invalid_request(message: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_REQUEST, message)
    }

    /// -32602.
    pub fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_PARAMS, message)
    }

    /// -32603.
    pub fn internal(message: impl Into<String>) -> RpcError {
        RpcError::new(INTERNAL_ERROR, message)
    }
}

/// A request id: a string or an integer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestId {
    /// `"id": "abc"`.
    Str(String),
    /// `"id": 7`.
    Int(i64),
}

impl RequestId {
    fn to_value(&self) -> Value {
        match self {
            RequestId::Str(s) => Value::String(s.clone()),
            RequestId::Int(i) => Value::from(*i),
        }
    }
}

/// One decoded inbound message.
#[derive(Debug)]
pub enum Incoming {
    /// A request to answer.
    Request {
        /// Its id.
        id: RequestId,
        /// The method name.
        method: String,
        /// Its params (`{}` when absent or null).
        params: Value,
    },
    /// A notification (no id): never answered.
    Notification {
        /// The method name.
        method: String,
    },
    /// Not a valid message: the error response to send back (its id may be null).
    Invalid(String),
}

/// Decodes one frame's bytes.
pub fn decode(bytes: &[u8]) -> Incoming {
    if !values_at_most(bytes, MAX_VALUES) {
        return Incoming::Invalid(error_response(
            None,
            &RpcError::invalid_request(format!(
                "invalid request: message has more than {MAX_VALUES} JSON values"
            )),
        ));
    }
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => {
            return Incoming::Invalid(error_response(
                None,
                &RpcError::new(PARSE_ERROR, format!("parse error: {e}")),
            ))
        }
    };
    let Value::Object(mut object) = value else {
        return Incoming::Invalid(error_response(
            None,
            &RpcError::invalid_request("invalid request: a message must be a JSON object"),
        ));
    };
    let id = match object.remove("id") {
        None => None,
        Some(Value::String(s)) => Some(RequestId::Str(s)),
        Some(Value::Number(n)) if n.as_i64().is_some() => n.as_i64().map(RequestId::Int),
        Some(_) => {
            return Incoming::Invalid(error_response(
                None,
                &RpcError::invalid_request("invalid request: id must be a string or an integer"),
            ))
        }
    };
    let method = match object.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => {
            return Incoming::Invalid(error_response(
                id.as_ref(),
                &RpcError::invalid_request("invalid request: method must be a string"),
            ))
        }
        None => {
            return Incoming::Invalid(error_response(
                id.as_ref(),
                &RpcError::invalid_request("invalid request: missing method"),
            ))
        }
    };
    let params = match object.remove("params") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(p) => p,
    };
    match id {
        Some(id) => Incoming::Request { id, method, params },
        None => Incoming::Notification { method },
    }
}

/// Whether `bytes` holds at most `limit` values: every value but the first follows a `,` or
/// opens a container, so `{`, `[` and `,` outside strings bound the count from above.
pub fn values_at_most(bytes: &[u8], limit: usize) -> bool {
    let (mut count, mut in_string, mut escaped) = (1usize, false, false);
    for &b in bytes {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' | b',' => {
                count += 1;
                if count > limit {
                    return false;
                }
            }
            _ => {}
        }
    }
    count <= limit
}

/// A success response as text.
pub fn result_response(id: &RequestId, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id.to_value(), "result": result}).to_string()
}

/// An error response as text (`id: null` when the request's id is unknown).
pub fn error_response(id: Option<&RequestId>, error: &RpcError) -> String {
    let id = id.map_or(Value::Null, RequestId::to_value);
    let mut body = json!({"code": error.code, "message": error.message});
    if let Some(data) = &error.data {
        body["data"] = data.clone();
    }
    json!({"jsonrpc": "2.0", "id": id, "error": body}).to_string()
}

/// A notification as text.
pub fn notification(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string()
}

/// Typed access to a request's params; every error is -32602 naming the field.
pub struct Params<'a> {
    object: Option<&'a Map<String, Value>>,
}

impl<'a> Params<'a> {
    /// Wraps `params`, which must be an object.
    pub fn new(params: &'a Value) -> Result<Params<'a>, RpcError> {
        match params {
            Value::Object(object) => Ok(Params {
                object: Some(object),
            }),
            _ => Err(RpcError::invalid_params("params must be an object")),
        }
    }

    /// The raw value of `name`, `None` when absent or null.
    pub fn get(&self, name: &str) -> Option<&'a Value> {
        self.object
            .and_then(|o| o.get(name))
            .filter(|v| !v.is_null())
    }

    /// A required string.
    pub fn string(&self, name: &str) -> Result<&'a str, RpcError> {
        self.opt_string(name)?
            .ok_or_else(|| RpcError::invalid_params(format!("{name} is required (a string)")))
    }

    /// An optional string.
    pub fn opt_string(&self, name: &str) -> Result<Option<&'a str>, RpcError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(RpcError::invalid_params(format!("{name} must be a string"))),
        }
    }

    /// An optional boolean (`default` when absent).
    pub fn bool_or(&self, name: &str, default: bool) -> Result<bool, RpcError> {
        match self.get(name) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(RpcError::invalid_params(format!(
                "{name} must be a boolean"
            ))),
        }
    }

    /// An optional non-negative integer.
    pub fn opt_u64(&self, name: &str) -> Result<Option<u64>, RpcError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| {
                RpcError::invalid_params(format!("{name} must be a non-negative integer"))
            }),
            Some(_) => Err(RpcError::invalid_params(format!(
                "{name} must be a non-negative integer"
            ))),
        }
    }

    /// An optional array of strings.
    pub fn opt_strings(&self, name: &str) -> Result<Option<Vec<String>>, RpcError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => strings(v, name).map(Some),
        }
    }

    /// An optional map of string to string.
    pub fn opt_string_map(&self, name: &str) -> Result<Option<Vec<(String, String)>>, RpcError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => string_map(v, name).map(Some),
        }
    }
}

/// `value` as an array of strings, or -32602 naming `name`.
pub fn strings(value: &Value, name: &str) -> Result<Vec<String>, RpcError> {
    let bad = || RpcError::invalid_params(format!("{name} must be an array of strings"));
    let Value::Array(items) = value else {
        return Err(bad());
    };
    items
        .iter()
        .map(|v| v.as_str().map(str::to_owned).ok_or_else(bad))
        .collect()
}

/// `value` as a map of string to string, or -32602 naming `name`.
pub fn string_map(value: &Value, name: &str) -> Result<Vec<(String, String)>, RpcError> {
    let Value::Object(map) = value else {
        return Err(RpcError::invalid_params(format!(
            "{name} must be an object of strings"
        )));
    };
    map.iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            _ => Err(RpcError::invalid_params(format!(
                "{name}.{k} must be a string"
            ))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_code(text: &str) -> (Value, i64) {
        let v: Value = serde_json::from_str(text).unwrap();
        (v["id"].clone(), v["error"]["code"].as_i64().unwrap())
    }

    #[test]
    fn garbage_and_non_objects_get_null_id_errors() {
        for (input, code) in [
            (&b"{not json"[..], PARSE_ERROR),
            (b"[1,2]", INVALID_REQUEST),
            (b"42", INVALID_REQUEST),
            (br#"{"id":1.5,"method":"x"}"#, INVALID_REQUEST),
        ] {
            let Incoming::Invalid(text) = decode(input) else {
                panic!("{input:?} decoded");
            };
            assert_eq!(error_code(&text), (Value::Null, code));
        }
    }

    #[test]
    fn requests_and_notifications_are_told_apart() {
        match decode(br#"{"id":"a","method":"m"}"#) {
            Incoming::Request { id, method, params } => {
                assert_eq!(id, RequestId::Str("a".into()));
                assert_eq!(method, "m");
                assert_eq!(params, json!({}));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decode(br#"{"jsonrpc":"2.0","method":"initialized"}"#),
            Incoming::Notification { .. }
        ));
        let Incoming::Invalid(text) = decode(br#"{"id":3}"#) else {
            panic!()
        };
        assert_eq!(error_code(&text), (json!(3), INVALID_REQUEST));
    }

    #[test]
    fn a_message_over_the_value_budget_is_refused_before_parsing() {
        let many = format!("[{}0]", "0,".repeat(MAX_VALUES));
        let Incoming::Invalid(text) = decode(many.as_bytes()) else {
            panic!("decoded")
        };
        assert!(text.contains("JSON values"), "{text}");
        let commas_in_a_string = format!(
            r#"{{"id":1,"method":"m","params":"{}"}}"#,
            ",".repeat(MAX_VALUES)
        );
        assert!(matches!(
            decode(commas_in_a_string.as_bytes()),
            Incoming::Request { .. }
        ));
    }

    #[test]
    fn params_errors_name_the_field() {
        let v = json!({"argv": [1], "tty": "yes", "env": {"A": 1}});
        let p = Params::new(&v).unwrap();
        assert!(p.opt_strings("argv").unwrap_err().message.contains("argv"));
        assert!(p.bool_or("tty", false).unwrap_err().message.contains("tty"));
        assert!(p
            .opt_string_map("env")
            .unwrap_err()
            .message
            .contains("env.A"));
        assert!(p
            .string("processId")
            .unwrap_err()
            .message
            .contains("processId"));
    }
}
