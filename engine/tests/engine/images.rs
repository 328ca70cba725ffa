//! Items with images: a zip archive's image files become data URLs in the revision (the same
//! revision as a JSONL file holding those data URLs), a mapped image field goes out as an
//! OpenAI `image_url` part and into the cache key, and what cannot be an image is refused.

use arbiter_domain::fields::FieldMapping;
use arbiter_domain::images::data_url;
use arbiter_domain::prompt::TemplateSyntax;
use arbiter_engine::catalog::{self, EvalForm, EvalOptions};
use arbiter_store::Store;
use arbiter_testkit::pipeline::{
    checkpoint, launch, test_worker, verdicts_by_case, work_until_complete,
};
use arbiter_testkit::recorder::Recorder;
use arbiter_testkit::stories;
use serde_json::{json, Value};
use std::io::Write;
use std::sync::Arc;

stories!(archives_with_images_become_revisions_whose_requests_carry_them);

/// Two tiny "images" (the bytes only have to be what the archive holds).
const CAT: &[u8] = b"\x89PNG\r\n\x1a\ncat";
const DOG: &[u8] = b"\x89PNG\r\n\x1a\ndog";

fn archive(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut buffer = std::io::Cursor::new(Vec::new());
    let mut writer = zip::ZipWriter::new(&mut buffer);
    let options =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in files {
        writer.start_file(*name, options).unwrap();
        writer.write_all(bytes).unwrap();
    }
    writer.finish().unwrap();
    buffer.into_inner()
}

fn items(cat: &str, dog: &str) -> String {
    [
        json!({"id": "a", "question": "What animal is this?", "picture": cat, "answer": "cat"}),
        json!({"id": "b", "question": "What animal is this?", "picture": [dog], "answer": "dog"}),
    ]
    .iter()
    .map(|item| item.to_string() + "\n")
    .collect()
}

async fn upload(
    store: &dyn Store,
    name: &str,
    file_name: &str,
    bytes: &[u8],
) -> Result<String, String> {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join(file_name);
    std::fs::write(&path, bytes).unwrap();
    catalog::upload_dataset_file(
        store,
        name,
        file_name,
        &path,
        None,
        catalog::upload_limits(),
    )
    .await
    .map(|revision| revision.content_hash)
    .map_err(|err| err.to_string())
}

async fn archives_with_images_become_revisions_whose_requests_carry_them(store: Arc<dyn Store>) {
    let zipped = archive(&[
        (
            "animals/items.jsonl",
            items("images/cat.png", "./images/dog.png").as_bytes(),
        ),
        ("animals/images/cat.png", CAT),
        ("animals/images/dog.png", DOG),
        ("__MACOSX/animals/._items.jsonl", b"resource fork"),
    ]);
    let from_archive = upload(store.as_ref(), "animals", "animals.zip", &zipped)
        .await
        .unwrap();
    // The same items with the images inline are the same revision.
    let inline = items(&data_url("image/png", CAT), &data_url("image/png", DOG));
    let from_jsonl = upload(
        store.as_ref(),
        "animals",
        "animals.jsonl",
        inline.as_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(
        from_archive, from_jsonl,
        "the revision covers the image bytes"
    );

    // Refused archives name the problem and store nothing.
    let datasets_before = store.list_datasets().await.unwrap().len();
    let two = archive(&[("a.jsonl", b"{}\n"), ("b.csv", b"x\n")]);
    let refused = upload(store.as_ref(), "broken", "two.zip", &two)
        .await
        .unwrap_err();
    assert!(refused.contains("2 data files"), "{refused}");
    let huge = vec![0u8; arbiter_domain::images::MAX_IMAGE_BYTES + 1];
    let too_big = archive(&[
        ("items.jsonl", items("cat.png", "dog.png").as_bytes()),
        ("cat.png", &huge),
        ("dog.png", DOG),
    ]);
    let refused = upload(store.as_ref(), "broken", "big.zip", &too_big)
        .await
        .unwrap_err();
    assert!(
        refused.contains("line 1") && refused.contains("resize"),
        "{refused}"
    );
    assert_eq!(store.list_datasets().await.unwrap().len(), datasets_before);

    // Ids are never images, and text naming a file the archive lacks stays text (an images
    // field holding it is refused when an eval reads it).
    let named = [
        json!({"id": "cat.png", "question": "What animal is this?", "picture": "cat.png", "answer": "cat", "source": "IMG_1.JPG"}),
    ]
    .iter()
    .map(|item| item.to_string() + "\n")
    .collect::<String>();
    let zipped = archive(&[("items.jsonl", named.as_bytes()), ("cat.png", CAT)]);
    upload(store.as_ref(), "named", "named.zip", &zipped)
        .await
        .unwrap();
    let items = store
        .items_after(
            store
                .list_datasets()
                .await
                .unwrap()
                .into_iter()
                .find(|dataset| dataset.name == "named")
                .and_then(|dataset| dataset.latest_revision)
                .unwrap()
                .id,
            -1,
            10,
            1 << 20,
        )
        .await
        .unwrap();
    let (_, item) = &items[0];
    assert_eq!(item.case_id, "cat.png");
    let fields = item.fields();
    assert_eq!(fields["picture"], json!(data_url("image/png", CAT)));
    assert_eq!(fields["source"], json!("IMG_1.JPG"));

    // An eval mapping the picture sends it as an image part of the user message.
    let dataset = store
        .list_datasets()
        .await
        .unwrap()
        .into_iter()
        .find(|dataset| dataset.name == "animals")
        .unwrap()
        .id;
    let form = |name: &str, api| EvalForm {
        name: name.into(),
        dataset_id: dataset,
        prompt_template: "{{ question }}".into(),
        max_tokens: 16,
        temperature: 0.0,
        repetitions: 1,
        seed: 1,
        grader: String::new(),
        options: EvalOptions {
            template_syntax: Some(TemplateSyntax::Jinja),
            api,
            mapping: Some(FieldMapping {
                input: "question".into(),
                target: Some("answer".into()),
                category: None,
                images: Some("picture".into()),
                ..FieldMapping::default()
            }),
            ..EvalOptions::default()
        },
    };
    let refused = catalog::define_eval(
        store.as_ref(),
        &form("on a base model", arbiter_domain::prompt::Api::Completions),
        None,
    )
    .await
    .unwrap_err();
    assert!(refused.to_string().contains("chat API"), "{refused}");
    let eval = catalog::define_eval(
        store.as_ref(),
        &form("animals seen", arbiter_domain::prompt::Api::Chat),
        None,
    )
    .await
    .unwrap();
    let recorder = Recorder::start("vision-model", |body: &Value| {
        let parts = body["messages"][0]["content"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let url = parts
            .iter()
            .find_map(|part| part["image_url"]["url"].as_str())
            .unwrap_or_default()
            .to_string();
        if url == data_url("image/png", CAT) {
            "Answer: cat"
        } else {
            "Answer: bird"
        }
        .to_string()
    })
    .await;
    let vision = checkpoint(
        store.as_ref(),
        "vision",
        &recorder.base_url,
        "vision-model",
        "",
    )
    .await;
    let run = launch(store.as_ref(), eval, vision).await;
    work_until_complete(store.clone(), &[run], test_worker("w")).await;
    let requests = recorder.requests();
    assert_eq!(
        requests.len(),
        2,
        "different images are different requests, never one cached answer"
    );
    let content = &requests[0].body["messages"][0]["content"];
    assert_eq!(
        content[0],
        json!({"type": "text", "text": "What animal is this?"})
    );
    assert_eq!(content[1]["type"], "image_url");
    let verdicts = verdicts_by_case(store.as_ref(), run).await;
    assert_eq!(
        verdicts,
        [
            ("a".to_string(), "pass".to_string()),
            ("b".to_string(), "fail".to_string())
        ]
    );
}
