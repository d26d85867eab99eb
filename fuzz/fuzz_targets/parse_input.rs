//! Arbitrary bytes through the input parser, the Anthropic detection and conversion: no panic,
//! and what parses serializes and parses back to the same messages.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(conversation) = engram::parse_conversation(data) {
        let json = serde_json::to_vec(&conversation.messages).expect("messages serialize");
        if !conversation.messages.is_empty() {
            let again = engram::parse_conversation(&json).expect("serialized messages parse");
            assert_eq!(again.messages, conversation.messages);
        }
        if let Ok(request) = engram::formats::anthropic::to_anthropic(&conversation) {
            let _ = engram::formats::anthropic::from_anthropic(&request);
        }
    }
    let _ = engram::formats::anthropic::detect(data);
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        if let Ok(conversation) = engram::formats::anthropic::from_anthropic(&value) {
            let _ = engram::formats::anthropic::to_anthropic(&conversation);
        }
    }
});
