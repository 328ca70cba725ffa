//! Chat prompts rendered with the model's own Jinja chat template (from the GGUF metadata), as
//! Hugging Face's `apply_chat_template(..., add_generation_prompt=True)` does.

use minijinja::{context, Environment, Error, ErrorKind};
use serde::Serialize;

/// One chat message as the template sees it.
#[derive(Clone, Debug, Serialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// A compiled chat template.
pub struct ChatTemplate {
    environment: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

const TEMPLATE_NAME: &str = "chat";

impl ChatTemplate {
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate, Error> {
        let mut environment = Environment::new();
        // Hugging Face templates call Python string methods and `raise_exception`.
        environment
            .set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        environment.add_function("raise_exception", |message: String| -> Result<(), Error> {
            Err(Error::new(ErrorKind::InvalidOperation, message))
        });
        environment.add_template_owned(TEMPLATE_NAME, source.to_string())?;
        Ok(ChatTemplate {
            environment,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        })
    }

    /// The template a model file carries (ChatML when it has none), with its tokenizer's
    /// beginning and end tokens.
    pub fn for_model(
        source: Option<&str>,
        tokenizer: &crate::tokenizer::TextTokenizer,
    ) -> Result<ChatTemplate, Error> {
        let token_name = |id: Option<u32>| {
            id.and_then(|id| tokenizer.token_text(id))
                .unwrap_or_default()
        };
        ChatTemplate::new(
            source.unwrap_or(CHATML_TEMPLATE),
            &token_name(tokenizer.bos),
            &token_name(Some(tokenizer.eos)),
        )
    }

    /// The prompt for `messages`, ending where the assistant's reply begins.
    pub fn render(&self, messages: &[ChatMessage]) -> Result<String, Error> {
        self.environment
            .get_template(TEMPLATE_NAME)?
            .render(context! {
                messages => minijinja::Value::from(minijinja::value::Serde(messages)),
                add_generation_prompt => true,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
            })
    }
}

/// ChatML, for a file without a template: the format SmolLM2 and many others use.
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}<|im_start|>{{ message.role }}\n\
{{ message.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

#[cfg(test)]
mod tests {
    use super::*;

    fn message(role: &str, content: &str) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }

    #[test]
    fn chatml_renders_each_message_and_opens_the_reply() {
        let template = ChatTemplate::new(CHATML_TEMPLATE, "", "<|im_end|>").unwrap();
        let prompt = template
            .render(&[message("system", "Be brief."), message("user", "Hi")])
            .unwrap();
        assert_eq!(
            prompt,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn hugging_face_templates_use_python_methods_and_can_refuse() {
        let source = "{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}\
            {{ raise_exception('roles must be user or assistant') }}{% endif %}\
            {{ bos_token }}[{{ m.role.upper() }}] {{ m.content.strip() }}{% endfor %}";
        let template = ChatTemplate::new(source, "<s>", "</s>").unwrap();
        assert_eq!(
            template.render(&[message("user", "  hello  ")]).unwrap(),
            "<s>[USER] hello"
        );
        let refused = template.render(&[message("tool", "x")]).unwrap_err();
        assert!(refused
            .to_string()
            .contains("roles must be user or assistant"));
    }
}
