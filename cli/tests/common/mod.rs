//! What several CLI test files share.

use std::path::PathBuf;

/// A file in the temporary directory, named after this test process and `name`,
/// removed when dropped.
pub struct Temp(pub PathBuf);

impl Temp {
    /// The path `rknpu-cli-<pid>-<name>` in the temporary directory (nothing is created).
    pub fn new(name: &str) -> Temp {
        Temp(std::env::temp_dir().join(format!("rknpu-cli-{}-{name}", std::process::id())))
    }

    /// The path as the command line takes it.
    pub fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
