//! One chat call to a model server, in the API it speaks, with retries.

use std::sync::Mutex;
use std::time::Duration;

use engram::usage::CallUsage;
use serde_json::{Value, json};

/// The API a server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// OpenAI chat completions (`POST {base}/chat/completions`): OpenAI, vLLM, llama.cpp's
    /// `llama-server`, LM Studio, OpenRouter, Ollama's `/v1`.
    OpenAi,
    /// Anthropic Messages (`POST {base}/v1/messages`, `x-api-key`, `anthropic-version`).
    Anthropic,
    /// Ollama's native API (`POST {base}/api/chat`).
    Ollama,
}

impl Api {
    /// Parses `openai`, `anthropic` or `ollama`.
    pub fn parse(name: &str) -> Option<Api> {
        match name.trim().to_ascii_lowercase().as_str() {
            "openai" | "openai-compatible" => Some(Api::OpenAi),
            "anthropic" => Some(Api::Anthropic),
            "ollama" => Some(Api::Ollama),
            _ => None,
        }
    }

    /// The name.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::OpenAi => "openai",
            Api::Anthropic => "anthropic",
            Api::Ollama => "ollama",
        }
    }

    /// The base URL when none is configured (as the SDKs take it).
    pub fn default_base_url(self) -> &'static str {
        match self {
            Api::OpenAi => "https://api.openai.com/v1",
            Api::Anthropic => "https://api.anthropic.com",
            Api::Ollama => "http://127.0.0.1:11434",
        }
    }

    /// The environment variable the API key is read from when none is configured.
    pub fn default_key_env(self) -> Option<&'static str> {
        match self {
            Api::OpenAi => Some("OPENAI_API_KEY"),
            Api::Anthropic => Some("ANTHROPIC_API_KEY"),
            Api::Ollama => None,
        }
    }
}

/// How to reach a model.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderConfig {
    /// The API.
    pub api: Api,
    /// The base URL, as the provider's SDK takes it (`http://127.0.0.1:8080/v1` for an
    /// OpenAI-compatible server, `https://api.anthropic.com` for Anthropic).
    pub base_url: String,
    /// The model name the server knows.
    pub model: String,
    /// The environment variable holding the API key (never the key itself); `None`: no key.
    pub api_key_env: Option<String>,
    /// The longest a call may take, retries excluded.
    pub timeout: Duration,
    /// Retries after a 429, a 5xx, a timeout or a refused connection.
    pub max_retries: u32,
    /// The first backoff; it doubles each retry, plus jitter, unless the server says
    /// `Retry-After`.
    pub retry_base: Duration,
    /// Sampling temperature (0.3).
    pub temperature: f64,
    /// The most tokens a summary may have, whatever the pipeline allows.
    pub max_summary_tokens: usize,
}

impl ProviderConfig {
    /// A summarizer's configuration as a user names it: the API by name (openai, anthropic or
    /// ollama), the model, and optionally the base URL (http or https) and the key's variable.
    /// The error says which part is wrong, in the words the fronts show.
    pub fn named(
        api: &str,
        model: &str,
        base_url: Option<&str>,
        api_key_env: Option<&str>,
    ) -> Result<Self, LlmError> {
        let api = Api::parse(api).ok_or_else(|| {
            LlmError::Config(format!(
                "unknown summarizer API {api:?}; expected openai, anthropic or ollama"
            ))
        })?;
        let mut config = ProviderConfig::new(api, model);
        if let Some(url) = base_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(LlmError::Config(format!(
                    "base_url {url:?} must start with http:// or https://"
                )));
            }
            config.base_url = url.to_owned();
        }
        if let Some(var) = api_key_env {
            config.api_key_env = Some(var.to_owned());
        }
        Ok(config)
    }

    /// A configuration with the API's defaults for `model`.
    pub fn new(api: Api, model: impl Into<String>) -> Self {
        ProviderConfig {
            api,
            base_url: api.default_base_url().to_owned(),
            model: model.into(),
            api_key_env: api.default_key_env().map(str::to_owned),
            timeout: Duration::from_secs(120),
            max_retries: 3,
            retry_base: Duration::from_millis(500),
            temperature: 0.3,
            max_summary_tokens: 2_048,
        }
    }

    /// The endpoint called.
    pub fn endpoint(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        match self.api {
            Api::OpenAi => format!("{base}/chat/completions"),
            Api::Anthropic if base.ends_with("/v1") => format!("{base}/messages"),
            Api::Anthropic => format!("{base}/v1/messages"),
            Api::Ollama => format!("{base}/api/chat"),
        }
    }
}

/// Tokens a call used, as the server reported them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Input tokens (cached ones included).
    pub input_tokens: usize,
    /// Output tokens.
    pub output_tokens: usize,
    /// Input tokens served from the provider's prompt cache.
    pub cached_tokens: usize,
    /// Calls made (retries included).
    pub calls: usize,
}

impl Usage {
    /// One call's usage.
    fn of_call(call: CallUsage) -> Self {
        Usage {
            input_tokens: call.input_tokens,
            output_tokens: call.output_tokens,
            cached_tokens: call.cached_tokens,
            calls: 1,
        }
    }

    fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cached_tokens += other.cached_tokens;
        self.calls += other.calls;
    }

    /// The cost in USD at the registry's price for the model (0 when unknown).
    pub fn cost(&self, spec: &engram::ModelSpec) -> f64 {
        spec.price.cost(
            self.input_tokens.saturating_sub(self.cached_tokens),
            self.cached_tokens,
            self.output_tokens,
        )
    }
}

/// A model's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The text.
    pub text: String,
    /// What the call used.
    pub usage: Usage,
    /// True when the server stopped because of the output limit.
    pub truncated: bool,
}

/// Why a call failed, for the user (never with the API key).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// The configuration cannot work (a missing API key, say).
    #[error("{0}")]
    Config(String),
    /// The server answered with an error status (after retries, for 429 and 5xx).
    #[error("{url} answered HTTP {status}: {body}")]
    Status {
        /// The endpoint.
        url: String,
        /// The status.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// No answer in time, or no connection (after retries).
    #[error("{url}: {reason}")]
    Unreachable {
        /// The endpoint.
        url: String,
        /// What happened.
        reason: String,
    },
    /// The answer was not what the API promises.
    #[error("{url}: {reason}")]
    Malformed {
        /// The endpoint.
        url: String,
        /// What was wrong.
        reason: String,
    },
}

/// A client for one model.
#[derive(Debug)]
pub struct Client {
    config: ProviderConfig,
    http: reqwest::blocking::Client,
    key: Option<String>,
    totals: Mutex<Usage>,
}

fn clip(s: &str, n: usize) -> String {
    let mut out: String = s.chars().take(n).collect();
    if s.chars().count() > n {
        out.push('…');
    }
    out
}

impl Client {
    /// A client; the API key is read from its environment variable now.
    pub fn new(config: ProviderConfig) -> Result<Self, LlmError> {
        let key = match &config.api_key_env {
            None => None,
            Some(var) => match std::env::var(var) {
                Ok(k) if !k.trim().is_empty() => Some(k.trim().to_owned()),
                _ if config.api == Api::OpenAi && !config.base_url.contains("api.openai.com") => {
                    // Local OpenAI-compatible servers need no key.
                    None
                }
                _ => {
                    return Err(LlmError::Config(format!(
                        "the {} API needs a key: set {var} (or name another variable)",
                        config.api.as_str()
                    )));
                }
            },
        };
        let http = reqwest::blocking::Client::builder()
            .timeout(config.timeout)
            .build()
            .map_err(|e| LlmError::Config(format!("HTTP client: {e}")))?;
        Ok(Client {
            config,
            http,
            key,
            totals: Mutex::new(Usage::default()),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ProviderConfig {
        &self.config
    }

    /// Everything used so far.
    pub fn totals(&self) -> Usage {
        *self.totals.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn body(&self, system: &str, user: &str, max_tokens: usize) -> Value {
        let c = &self.config;
        match c.api {
            Api::OpenAi => json!({
                "model": c.model,
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": user},
                ],
                "max_tokens": max_tokens,
                "temperature": c.temperature,
                "stream": false,
            }),
            Api::Anthropic => json!({
                "model": c.model,
                "system": system,
                "messages": [{"role": "user", "content": user}],
                "max_tokens": max_tokens,
                "temperature": c.temperature,
            }),
            Api::Ollama => json!({
                "model": c.model,
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": user},
                ],
                "stream": false,
                "options": {"temperature": c.temperature, "num_predict": max_tokens},
            }),
        }
    }

    /// Reads the text and usage out of a reply.
    fn parse(&self, url: &str, value: &Value) -> Result<Reply, LlmError> {
        let malformed = |reason: &str| LlmError::Malformed {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let n = |v: &Value| v.as_u64().unwrap_or(0) as usize;
        match self.config.api {
            Api::OpenAi => {
                let choice = value
                    .get("choices")
                    .and_then(|c| c.get(0))
                    .ok_or_else(|| malformed("no `choices[0]` in the reply"))?;
                let text = choice
                    .pointer("/message/content")
                    .and_then(Value::as_str)
                    .ok_or_else(|| malformed("no `choices[0].message.content` text"))?;
                Ok(Reply {
                    text: text.to_owned(),
                    usage: Usage::of_call(CallUsage::openai(&value["usage"])),
                    truncated: choice["finish_reason"] == "length",
                })
            }
            Api::Anthropic => {
                let blocks = value
                    .get("content")
                    .and_then(Value::as_array)
                    .ok_or_else(|| malformed("no `content` blocks in the reply"))?;
                let text: Vec<&str> = blocks
                    .iter()
                    .filter(|b| b["type"] == "text")
                    .filter_map(|b| b["text"].as_str())
                    .collect();
                Ok(Reply {
                    text: text.join(""),
                    usage: Usage::of_call(CallUsage::anthropic(&value["usage"])),
                    truncated: value["stop_reason"] == "max_tokens",
                })
            }
            Api::Ollama => {
                let text = value
                    .pointer("/message/content")
                    .and_then(Value::as_str)
                    .ok_or_else(|| malformed("no `message.content` text in the reply"))?;
                Ok(Reply {
                    text: text.to_owned(),
                    usage: Usage {
                        input_tokens: n(&value["prompt_eval_count"]),
                        output_tokens: n(&value["eval_count"]),
                        cached_tokens: 0,
                        calls: 1,
                    },
                    truncated: value["done_reason"] == "length",
                })
            }
        }
    }

    fn backoff(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(wait) = retry_after {
            return wait.min(Duration::from_secs(60));
        }
        use std::hash::BuildHasher;
        let base = self.config.retry_base.saturating_mul(1 << attempt.min(10));
        let jitter = std::collections::hash_map::RandomState::new().hash_one(attempt) % 1000;
        base + base.mul_f64(jitter as f64 / 4000.0)
    }

    /// One chat call: `system` as the instructions, `user` as the message; retried on 429, 5xx,
    /// timeouts and refused connections, honouring `Retry-After`.
    pub fn chat(&self, system: &str, user: &str, max_tokens: usize) -> Result<Reply, LlmError> {
        let url = self.config.endpoint();
        let body = self.body(system, user, max_tokens.max(1));
        let mut used = Usage::default();
        let mut attempt = 0;
        let result = loop {
            let mut request = self.http.post(&url).json(&body);
            request = match (self.config.api, &self.key) {
                (Api::Anthropic, key) => {
                    let r = request.header("anthropic-version", "2023-06-01");
                    match key {
                        Some(k) => r.header("x-api-key", k),
                        None => r,
                    }
                }
                (_, Some(k)) => request.bearer_auth(k),
                (_, None) => request,
            };
            used.calls += 1;
            let retryable = |attempt: u32| attempt < self.config.max_retries;
            match request.send() {
                Err(e) if (e.is_timeout() || e.is_connect()) && retryable(attempt) => {
                    tracing::warn!(url, attempt, error = %e, "retrying");
                    std::thread::sleep(self.backoff(attempt, None));
                }
                Err(e) => {
                    break Err(LlmError::Unreachable {
                        url: url.clone(),
                        reason: if e.is_timeout() {
                            format!("no answer within {:?}", self.config.timeout)
                        } else {
                            format!("{e}")
                        },
                    });
                }
                Ok(response) => {
                    let status = response.status();
                    if status.as_u16() == 429 || status.is_server_error() {
                        let retry_after = response
                            .headers()
                            .get("retry-after")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.trim().parse::<f64>().ok())
                            .map(Duration::from_secs_f64);
                        if retryable(attempt) {
                            tracing::warn!(url, attempt, status = status.as_u16(), "retrying");
                            std::thread::sleep(self.backoff(attempt, retry_after));
                            attempt += 1;
                            continue;
                        }
                    }
                    if !status.is_success() {
                        let body = response.text().unwrap_or_default();
                        break Err(LlmError::Status {
                            url: url.clone(),
                            status: status.as_u16(),
                            body: clip(body.trim(), 300),
                        });
                    }
                    let content_type = response
                        .headers()
                        .get("content-type")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_owned();
                    if !content_type.contains("json") {
                        break Err(LlmError::Malformed {
                            url: url.clone(),
                            reason: format!(
                                "expected JSON, got content type {content_type:?} (is the base URL right? {})",
                                self.config.base_url
                            ),
                        });
                    }
                    let text = match response.text() {
                        Ok(t) => t,
                        Err(e) => {
                            break Err(LlmError::Malformed {
                                url: url.clone(),
                                reason: format!("the reply was cut off: {e}"),
                            });
                        }
                    };
                    let value: Value = match serde_json::from_str(&text) {
                        Ok(v) => v,
                        Err(e) => {
                            break Err(LlmError::Malformed {
                                url: url.clone(),
                                reason: format!(
                                    "invalid JSON in the reply ({e}): {}",
                                    clip(&text, 200)
                                ),
                            });
                        }
                    };
                    break self.parse(&url, &value);
                }
            }
            attempt += 1;
        };
        let mut totals = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(mut reply) => {
                reply.usage.calls = used.calls;
                totals.add(reply.usage);
                Ok(reply)
            }
            Err(e) => {
                totals.add(used);
                Err(e)
            }
        }
    }
}
