//! Which GPUs a process may use and which it has open: the visibility variables in its
//! environment and the NVIDIA device files among its open descriptors.

use std::fs;

/// The GPU visibility variables of an environment block (NUL-separated `NAME=value`), as
/// `NAME=value; NAME=value` in a fixed order, or "" when none is set.
pub fn visible(environ: &[u8]) -> String {
    const NAMES: [&str; 2] = ["CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"];
    let mut out = Vec::new();
    for name in NAMES {
        let prefix = format!("{name}=");
        if let Some(v) = environ
            .split(|&b| b == 0)
            .find_map(|kv| kv.strip_prefix(prefix.as_bytes()))
        {
            out.push(format!("{name}={}", String::from_utf8_lossy(v)));
        }
    }
    out.join("; ")
}

/// The NVIDIA GPU device files (`/dev/nvidiaN`) process `pid` has open, as `nvidia0,nvidia3`
/// (sorted, each once), or "" (none, or its descriptors cannot be read).
pub fn open_devices(pid: u32) -> String {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return String::new();
    };
    gpu_device_names(dir.flatten().filter_map(|e| fs::read_link(e.path()).ok()))
}

/// The GPU device names among descriptor targets: `/dev/nvidiaN` only (not nvidiactl,
/// nvidia-uvm or nvidia-modeset, which every CUDA process opens).
pub fn gpu_device_names(targets: impl IntoIterator<Item = std::path::PathBuf>) -> String {
    let mut found: Vec<u32> = targets
        .into_iter()
        .filter_map(|t| {
            let name = t.to_str()?.strip_prefix("/dev/nvidia")?;
            name.parse::<u32>().ok()
        })
        .collect();
    found.sort_unstable();
    found.dedup();
    found
        .iter()
        .map(|n| format!("nvidia{n}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn visibility_variables_in_order() {
        let env = b"A=1\0NVIDIA_VISIBLE_DEVICES=all\0CUDA_VISIBLE_DEVICES=2,3\0";
        assert_eq!(
            visible(env),
            "CUDA_VISIBLE_DEVICES=2,3; NVIDIA_VISIBLE_DEVICES=all"
        );
        assert_eq!(visible(b"CUDA_VISIBLE_DEVICES=\0"), "CUDA_VISIBLE_DEVICES=");
        assert_eq!(visible(b"XCUDA_VISIBLE_DEVICES=1\0"), "");
    }

    #[test]
    fn only_gpu_device_files_count() {
        let t = [
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia3",
            "/dev/nvidia0",
            "/dev/nvidia3",
            "/tmp/dev/nvidia1",
            "socket:[123]",
        ]
        .map(PathBuf::from);
        assert_eq!(gpu_device_names(t), "nvidia0,nvidia3");
    }
}
