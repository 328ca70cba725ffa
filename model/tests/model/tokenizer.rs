//! The tokenizer rebuilt from SmolLM2's GGUF against llama.cpp's: token ids that llama.cpp
//! (node-llama-cpp 3.21.1, prebuilt llama.cpp, `tokenize(text, true)`) gave for the same file.
//! These catch the pre-tokenizer mistakes candle's own conversion makes for this model (a
//! prefix space after special tokens) and digit grouping.
//!
//! Needs the model file (`scripts/fetch-model`, or ARBITER_TEST_GGUF); without it the test says
//! so and passes, unless ARBITER_REQUIRE_MODEL=1.

use crate::common;

use std::path::PathBuf;

use arbiter_model::chat::{ChatMessage, ChatTemplate};
use arbiter_model::tokenizer::TextTokenizer;
use candle_core::quantized::gguf_file::{Content, Value};

fn metadata(path: &PathBuf) -> Content {
    let mut file = std::fs::File::open(path).unwrap();
    Content::read(&mut file).unwrap()
}

#[test]
fn token_ids_match_llama_cpp() {
    let Some(path) = common::model_file() else {
        return;
    };
    let tokenizer = TextTokenizer::from_gguf(&metadata(&path)).unwrap();
    let cases: [(&str, &[u32]); 7] = [
        ("Hello world", &[19556, 905]),
        ("12345", &[33, 34, 35, 36, 37]),
        (
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>",
            &[1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2],
        ),
        (" Paris", &[7042]),
        (
            "héllo ☃ 🎉",
            &[88, 2756, 31394, 4636, 242, 221, 15107, 232, 227],
        ),
        (
            "The year 2024 had 366 days.",
            &[
                504, 713, 216, 34, 32, 34, 36, 761, 216, 35, 38, 38, 2009, 30,
            ],
        ),
        ("<|im_start|>assistant\n", &[1, 520, 9531, 198]),
    ];
    for (text, expected) in cases {
        let ids = tokenizer.encode(text).unwrap();
        assert_eq!(ids, expected, "{text:?}");
        // Control tokens are not text, so decoding drops them; everything else round-trips.
        let without_control = text.replace("<|im_start|>", "").replace("<|im_end|>", "");
        assert_eq!(tokenizer.decode(&ids).unwrap(), without_control);
    }
    // llama.cpp adds no beginning-of-sequence token for this model, and neither does a
    // completion prompt here.
    assert!(!tokenizer.add_bos);
    assert_eq!(
        tokenizer.encode_prompt("Hello world").unwrap(),
        [19556, 905]
    );
    assert_eq!(tokenizer.eos, 2);
    assert!(
        tokenizer.stop_tokens.contains(&0),
        "<|endoftext|> ends a generation too"
    );
    // " ☃" is three tokens, one per UTF-8 byte after the space; each reports its raw bytes.
    let snowman: Vec<u8> = [4636, 242, 221]
        .iter()
        .flat_map(|id| tokenizer.token_bytes(*id).to_vec())
        .collect();
    assert_eq!(snowman, " ☃".as_bytes());
    assert_eq!(tokenizer.token_label(2), "<|im_end|>");
    assert!(tokenizer.token_bytes(2).is_empty());
}

#[test]
fn the_files_chat_template_renders_smollm2s_prompt() {
    let Some(path) = common::model_file() else {
        return;
    };
    let content = metadata(&path);
    let Some(Value::String(source)) = content.metadata.get("tokenizer.chat_template") else {
        panic!("SmolLM2's GGUF carries its chat template");
    };
    let template = ChatTemplate::new(source, "<|im_start|>", "<|im_end|>").unwrap();
    let prompt = template
        .render(&[ChatMessage {
            role: "user".into(),
            content: "What is the capital of France? Answer with one word.".into(),
        }])
        .unwrap();
    // The template adds SmolLM2's default system prompt when none is given. llama.cpp gave
    // these 42 ids for the same prompt.
    let expected: [u32; 42] = [
        1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411,
        407, 19712, 8182, 2, 198, 1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 19842, 351,
        582, 2229, 30, 2, 198, 1, 520, 9531, 198,
    ];
    let tokenizer = TextTokenizer::from_gguf(&content).unwrap();
    assert_eq!(tokenizer.encode(&prompt).unwrap(), expected);
}
