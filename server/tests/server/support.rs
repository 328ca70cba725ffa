//! The real router on a random port over a fresh SQLite database, for HTTP-level tests.

use arbiter_domain::accounts::Role;
use arbiter_store::Database;
use reqwest::{header, StatusCode};
use std::net::SocketAddr;

pub const PASSWORD: &str = "a-test-password";

pub struct TestApp {
    pub address: SocketAddr,
    pub store: std::sync::Arc<dyn arbiter_store::Store>,
    pub _directory: tempfile::TempDir,
}

impl TestApp {
    /// Serves the router on a random port over a fresh SQLite database with one user per role
    /// (named after the role) and one sample dataset.
    pub async fn spawn() -> TestApp {
        TestApp::spawn_serving("target/site").await
    }

    /// [`TestApp::spawn`] serving the built site's files from `site_root`.
    pub async fn spawn_serving(site_root: &str) -> TestApp {
        arbiter_testkit::egress::allow_loopback();
        let directory = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", directory.path().join("arbiter.db").display());
        let database = Database::open(&url).await.unwrap();
        let store = database.store();
        for role in Role::ALL {
            arbiter_engine::accounts::create_user(store.as_ref(), role.as_str(), PASSWORD, role)
                .await
                .unwrap();
        }
        arbiter_engine::catalog::upload_dataset(
            store.as_ref(),
            "sample",
            "s.jsonl",
            b"{\"id\":\"a\",\"input\":\"q\",\"target\":\"t\"}\n",
            None,
        )
        .await
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let options = server::http::leptos_options(site_root, address);
        let mailer = std::sync::Arc::new(arbiter_engine::clients::mail::Mailer::log_only());
        let app = server::http::router(&database, options, mailer)
            .await
            .unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        TestApp {
            address,
            store,
            _directory: directory,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    pub fn client() -> reqwest::Client {
        reqwest::Client::builder()
            .cookie_store(true)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
    }

    pub async fn login(
        &self,
        client: &reqwest::Client,
        username: &str,
        password: &str,
    ) -> reqwest::Response {
        client
            .post(self.url("/login"))
            .header(header::ACCEPT, "application/json")
            .form(&[("username", username), ("password", password)])
            .send()
            .await
            .unwrap()
    }

    /// A personal API token for the user named after `role`.
    pub async fn token_for(&self, role: Role) -> String {
        self.token_of(role.as_str()).await
    }

    /// A personal API token for the user `username`.
    pub async fn token_of(&self, username: &str) -> String {
        let user = self
            .store
            .find_user_credentials(username)
            .await
            .unwrap()
            .unwrap()
            .user;
        arbiter_engine::accounts::api_tokens::create_token(
            self.store.as_ref(),
            &user,
            "test",
            None,
            arbiter_store::now_ms(),
        )
        .await
        .unwrap()
        .1
    }

    /// A client logged in as the user named after `role`.
    pub async fn client_as(&self, role: Role) -> reqwest::Client {
        self.signed_in(role.as_str()).await
    }

    /// A client logged in as `username` (whose password is [`PASSWORD`]).
    pub async fn signed_in(&self, username: &str) -> reqwest::Client {
        let client = Self::client();
        let response = self.login(&client, username, PASSWORD).await;
        assert_eq!(response.status(), StatusCode::OK, "login as {username}");
        client
    }

    /// Objects of team `default`, owned by `researcher`, and `vera`, a researcher of another
    /// team (`vision`): for the object-level rows of the authorization matrices.
    pub async fn team_objects(&self) -> TeamObjects {
        use arbiter_engine::{catalog, runs, suites};
        let store = self.store.as_ref();
        let owner = store
            .find_user_credentials("researcher")
            .await
            .unwrap()
            .unwrap()
            .user;
        arbiter_engine::accounts::create_user(store, "vera", PASSWORD, Role::Researcher)
            .await
            .unwrap();
        assert!(store.set_team("vera", "vision").await.unwrap());
        let form = catalog::CheckpointForm {
            name: "ours".into(),
            endpoint_url: "http://127.0.0.1:9/v1".into(),
            model: "m".into(),
            max_in_flight: "8".into(),
            ..catalog::CheckpointForm::default()
        };
        let checkpoint = catalog::register_checkpoint(store, &form, Some(owner.id))
            .await
            .unwrap();
        let dataset = store.list_datasets().await.unwrap()[0].id;
        let eval = catalog::define_eval(
            store,
            &catalog::EvalForm {
                name: "ours".into(),
                dataset_id: dataset,
                prompt_template: "Q: {input}".into(),
                max_tokens: 8,
                temperature: 0.0,
                repetitions: 1,
                seed: 1,
                grader: String::new(),
                options: arbiter_engine::catalog::EvalOptions::default(),
            },
            Some(owner.id),
        )
        .await
        .unwrap();
        let suite = suites::create_suite(
            store,
            &suites::SuiteForm {
                name: "ours".into(),
                tier: "full".into(),
                every_nth: Some(0),
                eval_ids: vec![eval],
                ..suites::SuiteForm::default()
            },
            &owner.team,
            false,
            Some(owner.id),
        )
        .await
        .unwrap();
        let run = runs::launch_run(
            store,
            eval,
            checkpoint,
            arbiter_domain::run::Priority::Scheduled,
            &owner.team,
            Some(owner.id),
        )
        .await
        .unwrap()
        .run_id;
        let endpoint = store.list_endpoints().await.unwrap()[0].id;
        TeamObjects {
            eval: eval.get(),
            checkpoint: checkpoint.get(),
            endpoint,
            suite,
            run: run.get(),
        }
    }

    /// Uploads `body` as a dataset file through the form route, asking for a JSON answer.
    pub async fn upload(
        &self,
        client: &reqwest::Client,
        name: &str,
        file_name: &str,
        body: Vec<u8>,
    ) -> (StatusCode, serde_json::Value) {
        let form = reqwest::multipart::Form::new()
            .text("name", name.to_string())
            .part(
                "file",
                reqwest::multipart::Part::bytes(body).file_name(file_name.to_string()),
            );
        let response = client
            .post(self.url("/datasets/upload"))
            .header(header::ACCEPT, "application/json")
            .multipart(form)
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json().await.unwrap())
    }

    pub async fn call(
        &self,
        client: &reqwest::Client,
        endpoint: &str,
        args: &[(&str, &str)],
    ) -> StatusCode {
        client
            .post(self.url(&format!("/api/{endpoint}")))
            .form(args)
            .send()
            .await
            .unwrap()
            .status()
    }
}

/// Ids of the objects [`TestApp::team_objects`] makes.
pub struct TeamObjects {
    pub eval: i64,
    pub checkpoint: i64,
    pub endpoint: i64,
    pub suite: i64,
    pub run: i64,
}
