//! The Kubernetes objects that serve a checkpoint: for each data-parallel replica of its
//! serving plan, a Deployment of one pod (the engine's image, the command from the engine's
//! template, `tp` GPUs, the model volume mounted read-only, shared memory for tensor
//! parallelism, a readiness probe on `/health`) and a Service in front of it, so Arbiter
//! addresses every replica on its own (least outstanding, prefix affinity) as it does local
//! ones.
//!
//! Pure: the objects as JSON, for the Kubernetes launcher (`arbiter_engine::serving::kubernetes`)
//! to apply, watch and delete through the API. A test checks them against the API's OpenAPI
//! schemas offline, with `kubernetes-validate`.

use serde_json::{json, Value};

use crate::serving::command::{render, ReplicaVars};
use crate::serving::Serving;

/// The port every engine container listens on; its Service exposes it on the replica's
/// reserved port.
pub const SERVING_PORT: u16 = 8000;
/// The label every object Arbiter creates carries, to list and clean them up.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "arbiter");
/// The label of a replica's pods that names their launch (the Deployment's selector leaves it
/// out, since a selector cannot change: a new launch's pods replace the old ones').
pub const LAUNCH_LABEL: &str = "arbiter.dev/launch";

/// Where and how a cluster runs one engine, from the launcher's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterEngine {
    pub namespace: String,
    /// The engine's image, e.g. `vllm/vllm-openai:v0.6.3`.
    pub image: String,
    /// The engine's command template (see [`crate::serving::command`]); `{host}` is 0.0.0.0
    /// and `{port}` [`SERVING_PORT`] in a pod.
    pub command: String,
    /// The extended resource a GPU is requested by (`nvidia.com/gpu`); `None` for CPU engines.
    pub gpu_resource: Option<String>,
    /// The PersistentVolumeClaim holding the weights, mounted read-only at `model_mount`;
    /// a checkpoint's weights path must lie under it.
    pub model_claim: String,
    pub model_mount: String,
    /// Seconds a replica may take to load before Kubernetes gives up on its readiness.
    pub load_timeout_s: u32,
}

/// What one launch's objects are made for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReplicaSet<'a> {
    /// The launcher's id, as a label: it cleans up only its own objects.
    pub launcher: &'a str,
    /// The launch, as a label of its pods: the Service and the launcher look only at this
    /// launch's pods, never at a previous launch's still being deleted.
    pub launch: i64,
    pub checkpoint: &'a str,
    pub served_model: &'a str,
    /// One reserved port per replica, in replica order: its Service's port and part of its
    /// name.
    pub ports: &'a [u16],
}

/// One replica's name: `arbiter-<checkpoint>-p<port>`, lower case, `-` for anything else, cut
/// to fit a Service name (63 characters). The port is reserved for the checkpoint on its
/// launcher, so two of its checkpoints whose names differ only in case or punctuation still
/// get names of their own; two launchers sharing a namespace need port ranges apart.
pub fn replica_name(checkpoint: &str, port: u16) -> String {
    let suffix = format!("-p{port}");
    let mut slug: String = checkpoint
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    slug = slug.trim_matches('-').to_string();
    let room = 63 - "arbiter-".len() - suffix.len();
    slug.truncate(room);
    let slug = slug.trim_end_matches('-');
    format!("arbiter-{slug}{suffix}")
}

/// The rule for the URLs Arbiter registers for a namespace's replicas: each Service's cluster
/// DNS name on its port (see [`crate::serving::replica_url_from`]).
pub fn service_url_rule(namespace: &str) -> String {
    format!("http://{{name}}.{namespace}.svc:{{port}}/v1")
}

/// The Deployment and the Service of every replica of `serving` for `checkpoint`, in the
/// order to apply them; `Err` names what cannot be served (weights outside the model volume,
/// a template that does not render).
pub fn replica_objects(
    engine: &ClusterEngine,
    set: &ReplicaSet<'_>,
    serving: &Serving,
) -> Result<Vec<Value>, String> {
    let mount = engine.model_mount.trim_end_matches('/');
    if !serving.model_path.starts_with(&format!("{mount}/")) {
        return Err(format!(
            "the weights `{}` are not under the model volume's mount {mount}",
            serving.model_path
        ));
    }
    let tp = serving.plan.tensor_parallel;
    let mut objects = Vec::new();
    for (replica, port) in (0u32..).zip(set.ports.iter().copied()) {
        let name = replica_name(set.checkpoint, port);
        let command = render(
            &engine.command,
            &ReplicaVars {
                path: &serving.model_path,
                model: set.served_model,
                host: "0.0.0.0",
                port: SERVING_PORT,
                tensor_parallel: tp,
                replica,
            },
        )?;
        let labels = json!({
            MANAGED_BY.0: MANAGED_BY.1,
            "app.kubernetes.io/name": name,
            "arbiter.dev/launcher": label_value(set.launcher),
            "arbiter.dev/checkpoint": label_value(set.checkpoint),
            "arbiter.dev/replica": replica.to_string(),
        });
        let mut pod_labels = labels.clone();
        pod_labels[LAUNCH_LABEL] = json!(set.launch.to_string());
        let resources = match &engine.gpu_resource {
            Some(gpu) => json!({"limits": {gpu: tp.to_string()}}),
            None => json!({}),
        };
        let period_s = 5;
        let deployment = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": engine.namespace, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
                // One replica holds its GPUs: the old pod goes before the new one starts.
                "strategy": {"type": "Recreate"},
                "template": {
                    "metadata": {"labels": pod_labels},
                    "spec": {
                        "containers": [{
                            "name": "engine",
                            "image": engine.image,
                            "command": command,
                            "ports": [{"name": "http", "containerPort": SERVING_PORT}],
                            "resources": resources,
                            "readinessProbe": {
                                "httpGet": {"path": "/health", "port": SERVING_PORT},
                                "periodSeconds": period_s,
                                "failureThreshold": 3,
                            },
                            // Loading weights takes minutes: readiness waits for the start-up
                            // probe, which allows the launcher's load timeout.
                            "startupProbe": {
                                "httpGet": {"path": "/health", "port": SERVING_PORT},
                                "periodSeconds": period_s,
                                "failureThreshold": engine.load_timeout_s.div_ceil(period_s).max(1),
                            },
                            "volumeMounts": [
                                {"name": "model", "mountPath": mount, "readOnly": true},
                                {"name": "shm", "mountPath": "/dev/shm"},
                            ],
                        }],
                        "volumes": [
                            {"name": "model", "persistentVolumeClaim": {"claimName": engine.model_claim, "readOnly": true}},
                            // Tensor-parallel workers share tensors through /dev/shm, which a
                            // container's default 64 MiB cannot hold.
                            {"name": "shm", "emptyDir": {"medium": "Memory"}},
                        ],
                    },
                },
            },
        });
        let service = json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": engine.namespace, "labels": labels},
            "spec": {
                "selector": {"app.kubernetes.io/name": name, LAUNCH_LABEL: set.launch.to_string()},
                "ports": [{"name": "http", "port": port, "targetPort": "http"}],
            },
        });
        objects.push(deployment);
        objects.push(service);
    }
    Ok(objects)
}

/// A label value: at most 63 characters of letters, digits, `-`, `_` and `.`, starting and
/// ending with a letter or digit.
pub fn label_value(text: &str) -> String {
    let mut value: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect();
    while value.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        value.pop();
    }
    value
        .trim_start_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving::plan::ServingPlan;
    use crate::serving::ServingEngine;

    pub(crate) fn vllm() -> ClusterEngine {
        ClusterEngine {
            namespace: "evals".into(),
            image: "vllm/vllm-openai:v0.6.3".into(),
            command: "vllm serve {path} --served-model-name {model} --tensor-parallel-size {tp} --host {host} --port {port}".into(),
            gpu_resource: Some("nvidia.com/gpu".into()),
            model_claim: "checkpoints".into(),
            model_mount: "/models".into(),
            load_timeout_s: 900,
        }
    }

    pub(crate) fn serving(replicas: u32, tp: u32) -> Serving {
        Serving {
            engine: ServingEngine::Vllm,
            model_path: "/models/run-7/step 1000".into(),
            plan: ServingPlan {
                engine: ServingEngine::Vllm,
                tensor_parallel: tp,
                replicas,
                weights_gib: Some(140.0),
                kv_cache_gib_per_gpu: Some(30.0),
                sustained_tokens_per_s: None,
                startup_s: 120.0,
            },
        }
    }

    fn set<'a>(checkpoint: &'a str, ports: &'a [u16]) -> ReplicaSet<'a> {
        ReplicaSet {
            launcher: "cluster-a",
            launch: 7,
            checkpoint,
            served_model: "llama-70b",
            ports,
        }
    }

    #[test]
    fn each_replica_gets_a_deployment_and_a_service_with_its_gpus_and_probe() {
        let objects = replica_objects(
            &vllm(),
            &set("Llama 70B/step-1000", &[8100, 8101]),
            &serving(2, 4),
        )
        .unwrap();
        assert_eq!(objects.len(), 4);
        let deployment = &objects[0];
        assert_eq!(deployment["kind"], "Deployment");
        assert_eq!(
            deployment["metadata"]["name"],
            "arbiter-llama-70b-step-1000-p8100"
        );
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["resources"]["limits"]["nvidia.com/gpu"], "4");
        assert_eq!(
            container["command"],
            json!([
                "vllm",
                "serve",
                "/models/run-7/step 1000",
                "--served-model-name",
                "llama-70b",
                "--tensor-parallel-size",
                "4",
                "--host",
                "0.0.0.0",
                "--port",
                "8000"
            ]),
            "the path with a space stays one argument"
        );
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/health");
        assert_eq!(container["startupProbe"]["failureThreshold"], 180);
        assert_eq!(
            deployment["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]
                ["claimName"],
            "checkpoints"
        );
        assert_eq!(
            deployment["metadata"]["labels"]["arbiter.dev/checkpoint"],
            "Llama_70B_step-1000"
        );
        assert_eq!(
            deployment["metadata"]["labels"]["arbiter.dev/launcher"],
            "cluster-a"
        );
        assert_eq!(
            deployment["spec"]["template"]["metadata"]["labels"][LAUNCH_LABEL],
            "7"
        );
        assert_eq!(objects[1]["kind"], "Service");
        assert_eq!(objects[1]["spec"]["ports"][0]["port"], 8100);
        assert_eq!(objects[1]["spec"]["selector"][LAUNCH_LABEL], "7");
        assert_eq!(
            objects[3]["metadata"]["name"],
            "arbiter-llama-70b-step-1000-p8101"
        );
        assert_eq!(
            crate::serving::replica_url_from(
                &service_url_rule("evals"),
                "ignored",
                "Llama 70B/step-1000",
                8101
            ),
            "http://arbiter-llama-70b-step-1000-p8101.evals.svc:8101/v1"
        );
        assert_eq!(
            crate::serving::replica_url_from("", "127.0.0.1", "c", 8101),
            "http://127.0.0.1:8101/v1"
        );
    }

    /// Against the Kubernetes API's own OpenAPI schemas, strictly (no unknown fields), with
    /// the PyPI package `kubernetes-validate` (`scripts/fetch-kubernetes-validate` installs it;
    /// `scripts/test` puts it on the PATH and requires it); without it the test says so and
    /// passes, unless ARBITER_REQUIRE_KUBERNETES_VALIDATE=1.
    #[test]
    fn the_objects_pass_the_kubernetes_schemas() {
        let Ok(found) = std::process::Command::new("kubernetes-validate")
            .arg("--version")
            .output()
        else {
            assert!(
                std::env::var("ARBITER_REQUIRE_KUBERNETES_VALIDATE").as_deref() != Ok("1"),
                "kubernetes-validate is not on the PATH"
            );
            eprintln!("skipping: kubernetes-validate is not on the PATH");
            return;
        };
        assert!(found.status.success());
        let directory =
            std::env::temp_dir().join(format!("arbiter-kubernetes-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let cpu = ClusterEngine {
            gpu_resource: None,
            ..vllm()
        };
        let mut files = Vec::new();
        for (index, engine) in [vllm(), cpu].iter().enumerate() {
            for object in replica_objects(
                engine,
                &set("Llama 70B/step-1000", &[8100, 8101]),
                &serving(2, 4),
            )
            .unwrap()
            {
                let file = directory.join(format!(
                    "{index}-{}-{}.json",
                    object["kind"].as_str().unwrap(),
                    object["metadata"]["name"].as_str().unwrap()
                ));
                std::fs::write(&file, serde_json::to_vec_pretty(&object).unwrap()).unwrap();
                files.push(file);
            }
        }
        // The manifests that deploy Arbiter in a cluster, the launcher's RBAC among them.
        let manifests = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/kubernetes");
        let shipped = [
            "launcher.yaml",
            "server.yaml",
            "worker.yaml",
            "migrate-job.yaml",
        ]
        .map(|file| std::path::Path::new(manifests).join(file));
        let shipped_objects = 9;
        for version in ["1.30.0", "1.37.0"] {
            let checked = std::process::Command::new("kubernetes-validate")
                .args(["--strict", "-k", version])
                .args(&files)
                .args(&shipped)
                .output()
                .unwrap();
            let report = String::from_utf8_lossy(&checked.stdout).to_string()
                + &String::from_utf8_lossy(&checked.stderr);
            assert!(checked.status.success(), "Kubernetes {version}: {report}");
            assert_eq!(
                report.matches(" passed for resource ").count(),
                files.len() + shipped_objects,
                "Kubernetes {version}: {report}"
            );
        }
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn weights_outside_the_model_volume_and_long_names_are_handled() {
        let mut outside = serving(1, 1);
        outside.model_path = "/etc/passwd".into();
        assert!(replica_objects(&vllm(), &set("c", &[1]), &outside)
            .unwrap_err()
            .contains("not under the model volume's mount /models"));
        let sibling = Serving {
            model_path: "/models-other/x".into(),
            ..serving(1, 1)
        };
        assert!(replica_objects(&vllm(), &set("c", &[1]), &sibling).is_err());
        let long = replica_name(&"x".repeat(200), 18100);
        assert!(long.len() <= 63 && long.ends_with("-p18100"), "{long}");
        assert_ne!(replica_name("A B", 1), replica_name("a-b", 2));
        let cpu = ClusterEngine {
            gpu_resource: None,
            ..vllm()
        };
        let objects = replica_objects(&cpu, &set("c", &[1]), &serving(1, 1)).unwrap();
        assert_eq!(
            objects[0]["spec"]["template"]["spec"]["containers"][0]["resources"],
            json!({})
        );
    }
}
