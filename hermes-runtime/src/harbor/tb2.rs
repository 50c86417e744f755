//! Upstream Hermes's Terminal-Bench 2 rows (`NousResearch/terminal-bench-2`: `task_name`,
//! `category`, `instruction`, `docker_image`, `environment_tar` and `tests_tar` as base64
//! gzipped tarballs, `test_sh`), unpacked into Harbor task directories so the Harbor runner
//! runs them unchanged.

use std::io::Read;
use std::path::Path;

use base64::Engine as _;
use serde::Deserialize;

use super::HarborError;

/// One row of the dataset.
#[derive(Debug, Clone, Deserialize)]
pub struct Tb2Row {
    /// The task's name (its directory's).
    pub task_name: String,
    /// Its category.
    #[serde(default)]
    pub category: Option<String>,
    /// The prompt.
    pub instruction: String,
    /// The prebuilt image, when there is one.
    #[serde(default)]
    pub docker_image: Option<String>,
    /// `environment/` as a base64 gzipped tarball (its `Dockerfile` builds the image).
    #[serde(default)]
    pub environment_tar: Option<String>,
    /// `tests/` as a base64 gzipped tarball.
    #[serde(default)]
    pub tests_tar: Option<String>,
    /// `tests/test.sh`.
    #[serde(default)]
    pub test_sh: Option<String>,
}

/// Seconds upstream's environment let `test.sh` run (`test_timeout`).
pub const UPSTREAM_TEST_TIMEOUT: f64 = 180.0;

/// Writes `row` as the Harbor task directory `root/<task_name>`: `instruction.md`,
/// `task.toml` (`docker_image`, `category`, the verifier timeout upstream used),
/// `environment/` and `tests/` from the tarballs, `tests/test.sh` from `test_sh`.
pub fn unpack_row(row: &Tb2Row, root: &Path) -> Result<(), HarborError> {
    let bad =
        |what: &str| HarborError::Layout(format!("terminal-bench-2 row {}: {what}", row.task_name));
    if row.task_name.is_empty()
        || !row
            .task_name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        || row.task_name.starts_with('.')
    {
        return Err(bad("its task_name is not a plain directory name"));
    }
    let dir = root.join(&row.task_name);
    let io = |e: std::io::Error| HarborError::Read {
        path: dir.clone(),
        source: e,
    };
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(io)?;
    }
    std::fs::create_dir_all(dir.join("tests")).map_err(io)?;
    std::fs::write(dir.join("instruction.md"), &row.instruction).map_err(io)?;
    let mut toml = String::from("schema_version = \"1.0\"\n\n[metadata]\n");
    if let Some(category) = &row.category {
        toml.push_str(&format!("category = {}\n", toml_string(category)));
    }
    toml.push_str(&format!(
        "\n[verifier]\ntimeout_sec = {UPSTREAM_TEST_TIMEOUT:.1}\n\n[environment]\n"
    ));
    if let Some(image) = row.docker_image.as_deref().filter(|i| !i.is_empty()) {
        toml.push_str(&format!("docker_image = {}\n", toml_string(image)));
    }
    std::fs::write(dir.join("task.toml"), toml).map_err(io)?;
    for (tarball, into) in [
        (&row.environment_tar, "environment"),
        (&row.tests_tar, "tests"),
    ] {
        if let Some(b64) = tarball.as_deref().filter(|t| !t.is_empty()) {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .map_err(|e| bad(&format!("{into}_tar is not base64: {e}")))?;
            let mut tar = Vec::new();
            flate2::read::GzDecoder::new(&raw[..])
                .read_to_end(&mut tar)
                .map_err(|e| bad(&format!("{into}_tar is not gzip: {e}")))?;
            let target = dir.join(into);
            std::fs::create_dir_all(&target).map_err(io)?;
            // `unpack` refuses entries that would land outside the target.
            tar::Archive::new(&tar[..])
                .unpack(&target)
                .map_err(|e| bad(&format!("{into}_tar: {e}")))?;
        }
    }
    if let Some(sh) = &row.test_sh {
        std::fs::write(dir.join("tests/test.sh"), sh).map_err(io)?;
    }
    Ok(())
}

fn toml_string(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}
