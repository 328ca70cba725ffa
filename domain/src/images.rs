//! Images in items. An image travels inside the item as a data URL (`data:image/png;base64,…`),
//! so a dataset revision's hash covers its bytes, a request's cache key covers what was sent,
//! and no endpoint is ever asked to fetch anything. Files inside an uploaded archive become
//! data URLs when the archive is read. On the wire an image is an OpenAI `image_url` content
//! part of the user message; Inspect's `{"type": "image", "image": …}` parts are read too.

use crate::fields::{ChatMessage, Role};
use base64::Engine;
use serde::de::Error as _;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// Largest image accepted, decoded: its data URL (a third longer) must fit the longest text an
/// item field may hold, the longest prompt Arbiter sends. Larger images are resized first.
pub const MAX_IMAGE_BYTES: usize = crate::prompt::MAX_PROMPT_BYTES / 4 * 3 - 1024;
/// Most images one item may carry.
pub const MAX_IMAGES: usize = 16;

/// The media types endpoints accept, by file extension.
const MEDIA_TYPES: &[(&str, &str)] = &[
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
];

/// The media type of an image file, from its name; `None` for other files.
pub fn media_type_of(file_name: &str) -> Option<&'static str> {
    let extension = file_name.rsplit_once('.')?.1.to_ascii_lowercase();
    MEDIA_TYPES
        .iter()
        .find(|(known, _)| *known == extension)
        .map(|(_, media_type)| *media_type)
}

/// A data URL holding `bytes`.
pub fn data_url(media_type: &str, bytes: &[u8]) -> String {
    format!(
        "data:{media_type};base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// Checks an image reference: a base64 data URL of a known image type within the size limit.
/// Links are refused: the endpoint would fetch them, and the revision could not say what the
/// model saw.
pub fn check_image(url: &str) -> Result<(), String> {
    let Some(rest) = url.strip_prefix("data:") else {
        let shown: String = url.chars().take(40).collect();
        return Err(format!(
            "`{shown}` is not a data URL; give images as data:image/…;base64 URLs or as files in an uploaded archive"
        ));
    };
    let (media_type, payload) = rest
        .split_once(";base64,")
        .ok_or("an image data URL must be base64 (data:image/png;base64,…)")?;
    if !MEDIA_TYPES.iter().any(|(_, known)| *known == media_type) {
        return Err(format!(
            "images are PNG, JPEG, GIF or WebP; `{media_type}` is not one of them"
        ));
    }
    if payload.len() / 4 * 3 > MAX_IMAGE_BYTES {
        return Err(too_large());
    }
    base64::engine::general_purpose::STANDARD
        .decode(payload)
        .map_err(|_| "an image data URL holds invalid base64".to_string())?;
    Ok(())
}

/// The refusal of an image over [`MAX_IMAGE_BYTES`].
pub fn too_large() -> String {
    format!(
        "an image is larger than {} KiB; resize it first",
        MAX_IMAGE_BYTES / 1024
    )
}

/// How an image reads in text shown to people: its type and size, not its bytes.
pub fn describe(url: &str) -> Option<String> {
    let (media_type, payload) = url.strip_prefix("data:")?.split_once(";base64,")?;
    Some(format!(
        "[{media_type} image, {} KiB]",
        (payload.len() / 4 * 3).div_ceil(1024)
    ))
}

/// An item field holding one image or a list of them (null or empty: none).
pub fn read_images(value: &Value) -> Result<Vec<String>, String> {
    let urls: Vec<&str> = match value {
        Value::Null => Vec::new(),
        Value::String(url) if url.trim().is_empty() => Vec::new(),
        Value::String(url) => vec![url],
        Value::Array(urls) => urls
            .iter()
            .map(|url| url.as_str().ok_or("must list images as data URLs"))
            .collect::<Result<_, _>>()?,
        _ => return Err("must be an image (a data URL) or a list of them".into()),
    };
    if urls.len() > MAX_IMAGES {
        return Err(format!(
            "holds {} images; an item has at most {MAX_IMAGES}",
            urls.len()
        ));
    }
    urls.iter().try_for_each(|url| check_image(url))?;
    Ok(urls.into_iter().map(String::from).collect())
}

/// Without images, a message is `{"role", "content": text}` as it always was (so cache keys of
/// text requests do not change); with them, its content is a list of parts: the text, then
/// each image.
impl Serialize for ChatMessage {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("role", &self.role)?;
        if self.images.is_empty() {
            map.serialize_entry("content", &self.content)?;
        } else {
            let mut parts = Vec::with_capacity(self.images.len() + 1);
            if !self.content.is_empty() {
                parts.push(serde_json::json!({"type": "text", "text": self.content}));
            }
            for url in &self.images {
                parts.push(serde_json::json!({"type": "image_url", "image_url": {"url": url}}));
            }
            map.serialize_entry("content", &parts)?;
        }
        map.end()
    }
}

/// Reads `content` as text or as parts (text, `image_url` and Inspect's `image`); text parts
/// are joined by newlines. Images are checked as [`check_image`] says.
impl<'de> Deserialize<'de> for ChatMessage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Other keys (OpenAI's `name`, Inspect's `id` or `source`) are not sent and are left
        // out, as they always were.
        #[derive(Deserialize)]
        struct Raw {
            role: Role,
            content: Value,
        }
        let raw = Raw::deserialize(deserializer)?;
        let (content, images) = match raw.content {
            Value::String(text) => (text, Vec::new()),
            Value::Array(parts) => read_parts(&parts).map_err(D::Error::custom)?,
            _ => return Err(D::Error::custom("content must be text or a list of parts")),
        };
        if !images.is_empty() && raw.role != Role::User {
            return Err(D::Error::custom("images go in user messages"));
        }
        Ok(ChatMessage {
            role: raw.role,
            content,
            images,
        })
    }
}

fn read_parts(parts: &[Value]) -> Result<(String, Vec<String>), String> {
    let mut texts = Vec::new();
    let mut images = Vec::new();
    for part in parts {
        let url = match part.get("type").and_then(Value::as_str) {
            Some("text") => {
                texts.push(
                    part.get("text")
                        .and_then(Value::as_str)
                        .ok_or("a text part needs its text")?,
                );
                continue;
            }
            Some("image_url") => part
                .get("image_url")
                .and_then(|image| image.get("url").or(Some(image)))
                .and_then(Value::as_str),
            Some("image") => part.get("image").and_then(Value::as_str),
            _ => return Err("a content part is text, image_url or image".into()),
        }
        .ok_or("an image part needs its URL")?;
        check_image(url)?;
        images.push(url.to_string());
    }
    if images.len() > MAX_IMAGES {
        return Err(format!("a message carries at most {MAX_IMAGES} images"));
    }
    Ok((texts.join("\n"), images))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A 1×1 PNG.
    fn png() -> String {
        data_url("image/png", &[0x89, b'P', b'N', b'G', 13, 10, 26, 10])
    }

    #[test]
    fn messages_with_images_go_out_as_openai_parts_and_read_back() {
        let message = ChatMessage {
            role: Role::User,
            content: "What is shown?".into(),
            images: vec![png()],
        };
        let wire = serde_json::to_value(&message).unwrap();
        assert_eq!(
            wire,
            json!({"role": "user", "content": [
                {"type": "text", "text": "What is shown?"},
                {"type": "image_url", "image_url": {"url": png()}}
            ]})
        );
        assert_eq!(
            serde_json::from_value::<ChatMessage>(wire).unwrap(),
            message
        );
        // Text-only messages keep their shape.
        let text = ChatMessage {
            role: Role::User,
            content: "hi".into(),
            images: Vec::new(),
        };
        assert_eq!(
            serde_json::to_value(&text).unwrap(),
            json!({"role": "user", "content": "hi"})
        );
        // Inspect's image parts.
        let inspect = json!({"role": "user", "content": [{"type": "image", "image": png()}, {"type": "text", "text": "Describe."}]});
        let read: ChatMessage = serde_json::from_value(inspect).unwrap();
        assert_eq!((read.content.as_str(), read.images.len()), ("Describe.", 1));
    }

    #[test]
    fn only_data_urls_of_known_types_are_images() {
        assert!(check_image(&png()).is_ok());
        assert!(check_image("https://example.com/cat.png")
            .unwrap_err()
            .contains("not a data URL"));
        assert!(check_image("data:text/html;base64,PGI+")
            .unwrap_err()
            .contains("text/html"));
        assert!(check_image("data:image/png;base64,@@@")
            .unwrap_err()
            .contains("invalid base64"));
        assert!(check_image("data:image/png,raw").is_err());
        assert_eq!(media_type_of("scans/Page-1.JPG"), Some("image/jpeg"));
        assert_eq!(media_type_of("items.jsonl"), None);
        assert_eq!(read_images(&json!([png(), png()])).unwrap().len(), 2);
        assert!(read_images(&json!(3)).is_err());
        let refused = serde_json::from_value::<ChatMessage>(
            json!({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}),
        );
        assert!(refused.is_err());
        // Images go in user messages; other keys of a message are left out, as before.
        let assistant =
            json!({"role": "assistant", "content": [{"type": "image", "image": png()}]});
        assert!(serde_json::from_value::<ChatMessage>(assistant).is_err());
        let named: ChatMessage =
            serde_json::from_value(json!({"role": "user", "content": "hi", "name": "ann"}))
                .unwrap();
        assert_eq!(named.content, "hi");
        assert_eq!(read_images(&json!(null)).unwrap(), Vec::<String>::new());
        assert_eq!(read_images(&json!("")).unwrap(), Vec::<String>::new());
        assert_eq!(describe(&png()).unwrap(), "[image/png image, 1 KiB]");
    }
}
