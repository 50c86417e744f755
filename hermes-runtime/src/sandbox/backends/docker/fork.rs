//! A group's prepared container as a snapshot image: the item's `prepare` runs once in a
//! container of its own, whose processes are then stopped; the container is committed to an
//! image (labelled with the run, so the reaper removes it after a killed run) and removed,
//! and each rollout gets a new container from that image (its layers shared, its changes its
//! own). The image is removed with the group.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bollard::models::ContainerConfig;
use bollard::query_parameters::{CommitContainerOptions, RemoveImageOptions};
use tracing::debug;

use super::budget::Lane;
use super::lifecycle::{LABEL_MANAGED, LABEL_ROLE, LABEL_TASK, ROLE_SNAPSHOT};
use super::{DockerSandbox, Shared};
use crate::sandbox::api::{prepare_in, Prepared, Sandbox, SandboxSpec};
use crate::sandbox::error::SandboxError;

/// Repository of the snapshot images (`hermes-env-snapshot:<run>-<group>`).
const REPOSITORY: &str = "hermes-env-snapshot";

/// One group's snapshot image.
pub(crate) struct Snapshot {
    shared: Arc<Shared>,
    image: String,
    removed: AtomicBool,
}

impl Snapshot {
    /// Prepares a container for `group` as `spec` asks and commits it.
    pub(crate) async fn prepare(
        shared: Arc<Shared>,
        group: &str,
        spec: &SandboxSpec,
    ) -> Result<Self, SandboxError> {
        let base = spec
            .image
            .clone()
            .unwrap_or_else(|| shared.settings.image.clone());
        let id = format!("prepared-{group}");
        let container = shared
            .start_container(&base, &id, shared.settings.lifetime, &spec.container)
            .await?;
        let template = DockerSandbox::new(&id, container, Arc::clone(&shared));
        let committed = match prepare_in(&template, spec).await {
            Ok(()) => commit(&shared, template.container_name(), group).await,
            Err(e) => Err(e),
        };
        let removed = template.teardown().await;
        let image = committed?;
        debug!(image, base, "group snapshot committed");
        // Made before the template's removal is judged: failing it drops (and removes) the image.
        let snapshot = Snapshot {
            shared,
            image,
            removed: AtomicBool::new(false),
        };
        removed?;
        Ok(snapshot)
    }
}

/// Commits `container` as the group's image (labelled as the container is, with the
/// snapshot role); returns its reference.
async fn commit(shared: &Shared, container: &str, group: &str) -> Result<String, SandboxError> {
    let run = &shared.owner.run_id;
    let tag = format!("{}-{group}", &run[..run.len().min(12)]);
    let mut labels: HashMap<String, String> = shared
        .owner
        .labels()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    labels.insert(LABEL_MANAGED.into(), "1".into());
    labels.insert(LABEL_ROLE.into(), ROLE_SNAPSHOT.into());
    labels.insert(LABEL_TASK.into(), format!("prepared-{group}"));
    let options = CommitContainerOptions {
        container: Some(container.to_owned()),
        repo: Some(REPOSITORY.to_owned()),
        tag: Some(tag.clone()),
        comment: Some("hermes-env: a group's prepared sandbox".into()),
        pause: true,
        ..Default::default()
    };
    let config = ContainerConfig {
        labels: Some(labels),
        ..Default::default()
    };
    let _slot = shared.lanes.slot(Lane::Create).await?;
    shared
        .docker
        .commit_container(options, config)
        .await
        .map_err(|e| SandboxError::docker(format!("committing {container} as a snapshot"), e))?;
    Ok(format!("{REPOSITORY}:{tag}"))
}

#[async_trait]
impl Prepared for Snapshot {
    async fn fork(
        &self,
        task_id: &str,
        spec: &SandboxSpec,
    ) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let container = self
            .shared
            .start_container(
                &self.image,
                task_id,
                self.shared.settings.lifetime,
                &spec.container,
            )
            .await?;
        let sandbox = Arc::new(DockerSandbox::new(
            task_id,
            container,
            Arc::clone(&self.shared),
        ));
        sandbox.prepare();
        Ok(sandbox)
    }

    async fn remove(&self) -> Result<(), SandboxError> {
        if self.removed.load(Ordering::SeqCst) {
            return Ok(());
        }
        let _slot = self.shared.lanes.slot(Lane::Create).await?;
        remove_image(&self.shared.docker, &self.image).await?;
        self.removed.store(true, Ordering::SeqCst);
        Ok(())
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        if self.removed.load(Ordering::SeqCst) {
            return;
        }
        let (docker, image) = (self.shared.docker.clone(), self.image.clone());
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = remove_image(&docker, &image).await;
            });
        }
    }
}

/// Removes a snapshot image (gone already: done).
pub(crate) async fn remove_image(
    docker: &bollard::Docker,
    image: &str,
) -> Result<(), SandboxError> {
    let options = RemoveImageOptions {
        force: true,
        noprune: false,
        ..Default::default()
    };
    match docker.remove_image(image, Some(options), None).await {
        Ok(_) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(()),
        Err(e) => Err(SandboxError::docker(
            format!("removing the snapshot {image}"),
            e,
        )),
    }
}
