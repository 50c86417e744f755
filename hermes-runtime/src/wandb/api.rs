//! W&B's public HTTP API as the official SDKs use it: the GraphQL `upsertBucket` mutation
//! creates (or updates) a run, `createRunFiles` hands out upload URLs for media files, and
//! `POST /files/{entity}/{project}/{run}/file_stream` appends history lines, replaces the
//! summary, marks uploaded files and completes the run. Requests authenticate with HTTP basic
//! auth `api:{WANDB_API_KEY}`.

use crate::diagnostics::{error_chain, snippet};
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::run_dir::{wandb_config, RunMeta, HISTORY_FILE, SUMMARY_FILE};
use super::settings::{ApiKey, WandbError, WandbSettings};

/// Per-request timeout.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

const UPSERT_BUCKET: &str = "mutation UpsertBucket($id: String, $name: String, $project: String, \
$entity: String, $groupName: String, $displayName: String, $config: JSONString) {
  upsertBucket(input: {id: $id, name: $name, modelName: $project, entityName: $entity, \
groupName: $groupName, displayName: $displayName, config: $config}) {
    bucket { id name displayName project { id name entity { id name } } }
    inserted
  }
}";

const CREATE_RUN_FILES: &str = "mutation CreateRunFiles($entity: String!, $project: String!, \
$run: String!, $files: [String!]!) {
  createRunFiles(input: {entityName: $entity, projectName: $project, runName: $run, files: $files}) {
    runID
    uploadHeaders
    files { name uploadUrl }
  }
}";

/// A run as the server knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRef {
    /// Entity name.
    pub entity: String,
    /// Project name.
    pub project: String,
    /// Run id (bucket name).
    pub name: String,
}

/// A W&B API client.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    base_url: String,
    key: ApiKey,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("base_url", &self.base_url)
            .finish()
    }
}

fn transport(url: &str, e: &reqwest::Error) -> WandbError {
    let mut reason = error_chain(e);
    if e.is_timeout() {
        reason = format!("no answer within {}s", REQUEST_TIMEOUT.as_secs());
    }
    WandbError::Transport {
        url: url.to_owned(),
        reason,
    }
}

/// The `file_stream` body appending `lines` at history line `offset`, replacing the summary
/// and marking `uploaded` media files as complete.
pub fn stream_body(
    offset: usize,
    lines: &[String],
    summary: Option<&str>,
    uploaded: &[String],
) -> Value {
    let mut files = Map::new();
    if !lines.is_empty() {
        files.insert(
            HISTORY_FILE.into(),
            json!({"offset": offset, "content": lines}),
        );
    }
    if let Some(s) = summary {
        files.insert(SUMMARY_FILE.into(), json!({"offset": 0, "content": [s]}));
    }
    let mut body = Map::new();
    body.insert("files".into(), Value::Object(files));
    if !uploaded.is_empty() {
        body.insert("uploaded".into(), json!(uploaded));
    }
    Value::Object(body)
}

/// The final `file_stream` body.
pub fn complete_body(exit_code: i32) -> Value {
    json!({"complete": true, "exitcode": exit_code})
}

impl Api {
    /// A client for `settings.base_url`; needs `WANDB_API_KEY`.
    pub fn new(settings: &WandbSettings) -> Result<Self, WandbError> {
        let key = settings.api_key.clone().ok_or(WandbError::Setting {
            name: "WANDB_API_KEY",
            message: "not set (create one at https://wandb.ai/authorize)".into(),
        })?;
        let http = crate::tls::client_builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("hermes-env/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| WandbError::Setting {
                name: "WANDB_BASE_URL",
                message: format!("HTTP client: {e}"),
            })?;
        Ok(Api {
            http,
            base_url: settings.base_url.clone(),
            key,
        })
    }

    async fn graphql(
        &self,
        operation: &'static str,
        query: &str,
        variables: Value,
    ) -> Result<Value, WandbError> {
        let url = format!("{}/graphql", self.base_url);
        let body = json!({"operationName": operation, "query": query, "variables": variables});
        let resp = self
            .http
            .post(&url)
            .basic_auth("api", Some(self.key.expose()))
            .json(&body)
            .send()
            .await
            .map_err(|e| transport(&url, &e))?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| transport(&url, &e))?;
        if !status.is_success() {
            return Err(WandbError::Status {
                url,
                status: status.as_u16(),
                body: snippet(&text),
            });
        }
        let doc: Value = serde_json::from_str(&text).map_err(|e| WandbError::Api {
            operation,
            message: format!("invalid JSON: {e}"),
        })?;
        if let Some(errors) = doc
            .get("errors")
            .and_then(Value::as_array)
            .filter(|e| !e.is_empty())
        {
            let message = errors
                .iter()
                .map(|e| {
                    e.get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("error")
                        .to_owned()
                })
                .collect::<Vec<_>>()
                .join("; ");
            return Err(WandbError::Api { operation, message });
        }
        Ok(doc.get("data").cloned().unwrap_or(Value::Null))
    }

    /// Creates or updates the run (`upsertBucket`); returns where it lives.
    pub async fn upsert_run(
        &self,
        meta: &RunMeta,
        config: &Map<String, Value>,
    ) -> Result<RunRef, WandbError> {
        let variables = json!({
            "name": meta.id,
            "project": meta.project,
            "entity": meta.entity,
            "groupName": meta.group,
            "displayName": meta.display_name,
            "config": Value::Object(wandb_config(config)).to_string(),
        });
        let data = self
            .graphql("UpsertBucket", UPSERT_BUCKET, variables)
            .await?;
        let bucket = &data["upsertBucket"]["bucket"];
        let field = |v: &Value, what: &str| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| WandbError::Api {
                    operation: "UpsertBucket",
                    message: format!("the answer has no {what}"),
                })
        };
        Ok(RunRef {
            name: field(&bucket["name"], "bucket name")?,
            project: field(&bucket["project"]["name"], "project name")?,
            entity: field(&bucket["project"]["entity"]["name"], "entity name")?,
        })
    }

    /// Sends one `file_stream` request.
    pub async fn stream(&self, run: &RunRef, body: &Value) -> Result<(), WandbError> {
        let url = format!(
            "{}/files/{}/{}/{}/file_stream",
            self.base_url, run.entity, run.project, run.name
        );
        let resp = self
            .http
            .post(&url)
            .basic_auth("api", Some(self.key.expose()))
            .json(body)
            .send()
            .await
            .map_err(|e| transport(&url, &e))?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            return Err(WandbError::Status {
                url,
                status: status.as_u16(),
                body: snippet(&text),
            });
        }
        Ok(())
    }

    /// Uploads a run-relative media file: `createRunFiles`, then a PUT to the upload URL.
    pub async fn upload_file(
        &self,
        run: &RunRef,
        rel: &str,
        bytes: Vec<u8>,
    ) -> Result<(), WandbError> {
        let variables =
            json!({"entity": run.entity, "project": run.project, "run": run.name, "files": [rel]});
        let data = self
            .graphql("CreateRunFiles", CREATE_RUN_FILES, variables)
            .await?;
        let prepared = &data["createRunFiles"];
        let url = prepared["files"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|f| f["name"].as_str() == Some(rel))
            .and_then(|f| f["uploadUrl"].as_str())
            .ok_or_else(|| WandbError::Api {
                operation: "CreateRunFiles",
                message: format!("no upload URL for {rel}"),
            })?;
        let url = if url.starts_with('/') {
            format!("{}{url}", self.base_url)
        } else {
            url.to_owned()
        };
        let mut put = self.http.put(&url).body(bytes);
        for header in prepared["uploadHeaders"].as_array().into_iter().flatten() {
            if let Some((k, v)) = header.as_str().and_then(|h| h.split_once(':')) {
                put = put.header(k.trim(), v.trim());
            }
        }
        let resp = put.send().await.map_err(|e| transport(&url, &e))?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            return Err(WandbError::Status {
                url,
                status: status.as_u16(),
                body: snippet(&text),
            });
        }
        Ok(())
    }
}
