//! Summarizers for engram over HTTP: OpenAI-compatible servers (OpenAI, vLLM, llama.cpp's
//! `llama-server`, LM Studio, OpenRouter, Ollama's `/v1`), Anthropic's Messages API, and
//! Ollama's native API.
//!
//! ```no_run
//! use engram_llm::{Api, Client, LlmSummarizer, ProviderConfig};
//!
//! let mut config = ProviderConfig::new(Api::OpenAi, "SmolLM2-135M-Instruct");
//! config.base_url = "http://127.0.0.1:8080/v1".into();
//! let summarizer = LlmSummarizer::new(Client::new(config)?, 4_096);
//! // options.summarizer = Some(std::sync::Arc::new(summarizer)) for engram::compact::compact
//! # Ok::<(), engram_llm::LlmError>(())
//! ```
//!
//! Calls are blocking (a server runs them on a blocking thread). Every call's usage (input,
//! output and cached tokens) adds up in [`Client::totals`]; [`Usage::cost`] prices it with the
//! model registry.

mod client;
mod summarizer;

pub use client::{Api, Client, LlmError, ProviderConfig, Reply, Usage};
pub use summarizer::LlmSummarizer;
