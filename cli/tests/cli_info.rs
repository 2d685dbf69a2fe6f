//! `rknpu info` as a child process, on the emulated kernels and with no device.

use std::process::Command;

const RKNPU: &str = env!("CARGO_BIN_EXE_rknpu");

fn info(device: Option<&str>) -> std::process::Output {
    let mut c = Command::new(RKNPU);
    c.arg("info");
    match device {
        Some(d) => c.env("RKNPU_DEVICE", d),
        None => c.env_remove("RKNPU_DEVICE"),
    };
    c.output().unwrap()
}

#[test]
fn info_describes_the_emulated_kernels() {
    for (spec, lines) in [
        (
            "emu",
            [
                "interface: vendor rknpu",
                "driver: rknpu 0.9.8",
                "node: /dev/dri/renderD129 (emulated)",
            ],
        ),
        (
            "emu:vendor-0.9.6",
            [
                "interface: vendor rknpu",
                "driver: rknpu 0.9.6",
                "iommu: enabled",
            ],
        ),
        (
            "emu:rocket",
            [
                "interface: rocket",
                "driver: rocket 0.0.0",
                "node: /dev/accel/accel0 (emulated)",
            ],
        ),
    ] {
        let o = info(Some(spec));
        assert_eq!(o.status.code(), Some(0), "{spec}");
        let out = String::from_utf8_lossy(&o.stdout);
        for l in lines {
            assert!(
                out.lines().any(|x| x == l),
                "{spec}: no line {l:?} in\n{out}"
            );
        }
        assert!(out.contains("cores: 3"));
    }
}

#[test]
fn info_without_a_device_exits_1_saying_how_to_select_one() {
    // This machine (and CI) has no NPU node.
    if std::path::Path::new("/dev/rknpu").exists()
        || std::path::Path::new("/dev/accel/accel0").exists()
    {
        return;
    }
    let o = info(None);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no NPU found") && err.contains("RKNPU_DEVICE"),
        "{err}"
    );
    let o = info(Some("emu:sideways"));
    assert_eq!(o.status.code(), Some(1));
    let o = Command::new(RKNPU)
        .args(["info", "extra"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}
