//! A Harbor task's image: its prebuilt `docker_image`, or `environment/` built through the
//! Docker API into `hermes-harbor/<task>:<hash of the build context>` (a build whose context is
//! unchanged finds its tag and is skipped). Builds are bounded by a semaphore and one tag is
//! built at most once at a time in this process; two processes building the same tag build
//! the same content. A base image the daemon lacks and cannot pull stops the task with one
//! line naming it and the ways to provide it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::query_parameters::{BuildImageOptions, CreateImageOptions};
use bollard::Docker;
use futures::StreamExt;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use super::task::{HarborTask, VerifierEnvironment, VerifierImage};
use super::HarborError;
use crate::sandbox::docker::Endpoint;

/// How long a pull of a missing base image may take before it counts as "cannot be pulled".
const PULL_LIMIT: Duration = Duration::from_secs(60);

/// A resolved image: its tag and the `WORKDIR` it declares.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskImage {
    /// The tag the sandbox runs.
    pub tag: String,
    /// The image's `WORKDIR` (`None`: unset).
    pub workdir: Option<String>,
    /// The image's `USER` (`None`: unset, root).
    pub user: Option<String>,
}

/// Builds and finds task images on one daemon.
#[derive(Debug, Clone)]
pub struct ImageBuilder {
    docker: Docker,
    permits: Arc<Semaphore>,
    building: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

impl ImageBuilder {
    /// A builder on `docker` running at most `concurrency` builds at once.
    pub fn new(docker: Docker, concurrency: usize) -> Self {
        ImageBuilder {
            docker,
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            building: Arc::default(),
        }
    }

    /// A builder on the daemon at `host` (`None`: `DOCKER_HOST`, else the local socket).
    pub async fn connect(host: Option<&str>, concurrency: usize) -> Result<Self, HarborError> {
        let (docker, _) = Endpoint::connect(host)
            .await
            .map_err(|e| HarborError::Docker(e.to_string()))?;
        Ok(ImageBuilder::new(docker, concurrency))
    }

    /// The task's image: built from `environment/Dockerfile` when there is one and
    /// `force_build` or no `docker_image`; else its `docker_image` (pulled when missing).
    pub async fn resolve(
        &self,
        task: &HarborTask,
        force_build: bool,
    ) -> Result<TaskImage, HarborError> {
        let tag = match (&task.config.environment.docker_image, task.dockerfile()) {
            (Some(image), None) => {
                self.ensure_present(&task.name, image).await?;
                image.clone()
            }
            (Some(image), Some(_)) if !force_build => {
                self.ensure_present(&task.name, image).await?;
                image.clone()
            }
            (_, Some(dockerfile)) => {
                let limit = task.config.environment.build_timeout_sec;
                self.build(task, &task.environment_dir(), &dockerfile, "", limit)
                    .await?
            }
            (None, None) => {
                return Err(HarborError::Layout(format!(
                    "task {} has neither docker_image nor environment/Dockerfile",
                    task.name
                )))
            }
        };
        self.describe(tag).await
    }

    /// The image of the task's separate verifier: its `docker_image` (pulled when missing),
    /// built from `tests/` (tagged `hermes-harbor/<task>-verifier:<hash>`), or the task's own.
    pub async fn resolve_verifier(
        &self,
        task: &HarborTask,
        verifier: &VerifierEnvironment,
        force_build: bool,
    ) -> Result<TaskImage, HarborError> {
        match &verifier.image {
            VerifierImage::Prebuilt(image) => {
                self.ensure_present(&task.name, image).await?;
                self.describe(image.clone()).await
            }
            VerifierImage::Build(dir) => {
                let limit = verifier.config.build_timeout_sec;
                let tag = self
                    .build(task, dir, &dir.join("Dockerfile"), "-verifier", limit)
                    .await?;
                self.describe(tag).await
            }
            VerifierImage::Task => self.resolve(task, force_build).await,
        }
    }

    /// `tag` with the `WORKDIR` and `USER` it declares.
    async fn describe(&self, tag: String) -> Result<TaskImage, HarborError> {
        let config = self
            .docker
            .inspect_image(&tag)
            .await
            .map_err(|e| HarborError::Docker(format!("inspecting {tag}: {e}")))?
            .config
            .unwrap_or_default();
        Ok(TaskImage {
            tag,
            workdir: config.working_dir.filter(|w| !w.is_empty()),
            user: config.user.filter(|u| !u.is_empty()),
        })
    }

    /// Makes sure `image` is on the daemon: present, or pulled within [`PULL_LIMIT`].
    async fn ensure_present(&self, task: &str, image: &str) -> Result<(), HarborError> {
        if self.docker.inspect_image(image).await.is_ok() {
            return Ok(());
        }
        let options = CreateImageOptions {
            from_image: Some(image.to_owned()),
            ..Default::default()
        };
        let pull = async {
            let mut stream = self.docker.create_image(Some(options), None, None);
            while let Some(item) = stream.next().await {
                item.map_err(|e| e.to_string())?;
            }
            Ok::<(), String>(())
        };
        let why = match tokio::time::timeout(PULL_LIMIT, pull).await {
            Ok(Ok(())) if self.docker.inspect_image(image).await.is_ok() => return Ok(()),
            Ok(Ok(())) => "the pull ended without the image".to_owned(),
            Ok(Err(e)) => e,
            Err(_) => format!("the pull took more than {} s", PULL_LIMIT.as_secs()),
        };
        Err(HarborError::MissingImage {
            task: task.to_owned(),
            image: image.to_owned(),
            why: why.lines().next().unwrap_or_default().to_owned(),
        })
    }

    /// Builds `context` (its `dockerfile`) into `hermes-harbor/<task><suffix>:<hash of the
    /// context>`, unless that tag exists; bounded by `limit_sec`.
    async fn build(
        &self,
        task: &HarborTask,
        context: &Path,
        dockerfile: &Path,
        suffix: &str,
        limit_sec: f64,
    ) -> Result<String, HarborError> {
        let archive = context_tar(context)?;
        let hash = hex(&Sha256::digest(&archive))[..16].to_owned();
        let name: String = task
            .name
            .to_lowercase()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let tag = format!("hermes-harbor/{name}{suffix}:{hash}");
        let lock = {
            let mut map = self.building.lock().expect("lock poisoned");
            Arc::clone(map.entry(tag.clone()).or_default())
        };
        let _one = lock.lock().await;
        if self.docker.inspect_image(&tag).await.is_ok() {
            return Ok(tag);
        }
        let text = std::fs::read_to_string(dockerfile).map_err(|e| HarborError::Read {
            path: dockerfile.to_owned(),
            source: e,
        })?;
        for base in base_images(&text) {
            self.ensure_present(&task.name, &base).await?;
        }
        let _permit = self
            .permits
            .acquire()
            .await
            .expect("the semaphore is never closed");
        tracing::info!(task = %task.name, %tag, context = %context.display(), "building a task image");
        let options = BuildImageOptions {
            dockerfile: "Dockerfile".into(),
            t: Some(tag.clone()),
            rm: true,
            forcerm: true,
            labels: Some(HashMap::from([(
                "hermes-env.harbor-task".to_owned(),
                task.name.clone(),
            )])),
            ..Default::default()
        };
        let limit = Duration::from_secs_f64(limit_sec.clamp(1.0, 86_400.0));
        let build = async {
            let mut stream =
                self.docker
                    .build_image(options, None, Some(bollard::body_full(archive.into())));
            let mut log = String::new();
            while let Some(item) = stream.next().await {
                let info = item.map_err(|e| format!("{e}\n{log}"))?;
                if let Some(detail) = info.error_detail {
                    return Err(format!("{}\n{log}", detail.message.unwrap_or_default()));
                }
                if let Some(s) = info.stream {
                    log.push_str(&s);
                    if log.len() > 8000 {
                        log.drain(..log.len() - 8000);
                    }
                }
            }
            Ok(())
        };
        match tokio::time::timeout(limit, build).await {
            Ok(Ok(())) => Ok(tag),
            Ok(Err(log)) => Err(HarborError::Build {
                task: task.name.clone(),
                message: log.trim().to_owned(),
            }),
            Err(_) => Err(HarborError::Build {
                task: task.name.clone(),
                message: format!("took more than build_timeout_sec = {} s", limit.as_secs()),
            }),
        }
    }
}

/// The images a Dockerfile's `FROM` lines name, build-stage names and `scratch` left out.
pub fn base_images(dockerfile: &str) -> Vec<String> {
    let mut stages = Vec::new();
    let mut bases = Vec::new();
    for line in dockerfile.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words
            .first()
            .is_none_or(|w| !w.eq_ignore_ascii_case("FROM"))
        {
            continue;
        }
        let rest: Vec<&str> = words[1..]
            .iter()
            .copied()
            .filter(|w| !w.starts_with("--"))
            .collect();
        let Some(image) = rest.first() else { continue };
        if *image != "scratch"
            && !stages.contains(&image.to_lowercase())
            && !bases.contains(&image.to_string())
        {
            bases.push(image.to_string());
        }
        if rest.len() >= 3 && rest[1].eq_ignore_ascii_case("AS") {
            stages.push(rest[2].to_lowercase());
        }
    }
    bases
}

/// The build context as a tar archive, entries in name order with fixed metadata, so equal
/// contexts give equal bytes (and hash).
fn context_tar(dir: &Path) -> Result<Vec<u8>, HarborError> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> std::io::Result<()> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            out.push(path.clone());
            if e.file_type()?.is_dir() {
                walk(&path, out)?;
            }
        }
        Ok(())
    }
    let io = |e: std::io::Error| HarborError::Read {
        path: dir.to_owned(),
        source: e,
    };
    let mut paths = Vec::new();
    walk(dir, &mut paths).map_err(io)?;
    let mut builder = tar::Builder::new(Vec::new());
    builder.mode(tar::HeaderMode::Deterministic);
    builder.follow_symlinks(false);
    for path in paths {
        let rel = path.strip_prefix(dir).expect("walked below dir");
        builder.append_path_with_name(&path, rel).map_err(io)?;
    }
    builder.into_inner().map_err(io)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_lines_name_the_base_images() {
        let df =
            "FROM --platform=linux/amd64 a/b:1 AS build\nRUN x\nfrom build\nFROM scratch\nFROM c\n";
        assert_eq!(base_images(df), ["a/b:1", "c"]);
    }
}
