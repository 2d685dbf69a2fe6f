//! Recording on the device under test and replaying the recording. On a board this is
//! the check that matters most for traces: the simulator must reproduce what the NPU
//! computed (model mode), and the recording must run again on the NPU with every buffer
//! at a new address (hw mode). The traces are kept in Cargo's test scratch directory
//! (the path is printed) so that a board's recordings can be looked at and shared.

use rknpu_driver::compute::matmul::Weights;
use rknpu_driver::compute::matmul::{Matmul, WeightBank};
use rknpu_driver::kernels::matmul::{MatmulSpec, Plan};
use rknpu_driver::kernels::single::Dtype;
use rknpu_driver::replay::{replay_check, replay_hw, replay_model};
use rknpu_driver::trace::{Chunk, Contents, MemorySink, Recorder, Trace};

/// Records one matmul of `spec` on the device under test (outputs as digests when
/// `redact`), keeps the file, and returns the trace.
fn record(spec: MatmulSpec, name: &str, redact: bool) -> Trace {
    let dev = super::dev();
    let sink = MemorySink::default();
    let mut r = Recorder::new(Box::new(sink.clone()), &dev.trace_header()).unwrap();
    r.redact_outputs(redact);
    dev.record_with(r).unwrap();
    let plan = Plan::new(spec).unwrap();
    let (m, k, n) = (spec.m, spec.k, spec.n);
    if spec.dtype == Dtype::Fp16 {
        let a: Vec<f32> = super::values(m * k, 3)
            .iter()
            .map(|&v| v as f32 / 128.0)
            .collect();
        let b: Vec<f32> = super::values(k * n, 4)
            .iter()
            .map(|&v| v as f32 / 128.0)
            .collect();
        let bank = std::sync::Arc::new(
            WeightBank::from_kn_in(&dev, &plan.layout, Weights::F32(&b)).unwrap(),
        );
        Matmul::for_plan(&bank, plan)
            .unwrap()
            .run::<f32, f32>(&a)
            .unwrap();
    } else {
        let shrink = |v: Vec<i32>| -> Vec<i32> {
            if spec.dtype == Dtype::Int4 {
                v.iter().map(|x| x.rem_euclid(16) - 8).collect()
            } else {
                v
            }
        };
        let (a, b) = (
            shrink(super::values(m * k, 3)),
            shrink(super::values(k * n, 4)),
        );
        let bank = std::sync::Arc::new(
            WeightBank::from_kn_in(&dev, &plan.layout, Weights::Int(&b)).unwrap(),
        );
        let c = Matmul::for_plan(&bank, plan)
            .unwrap()
            .run::<i32, i64>(&a)
            .unwrap();
        let want = super::cpu_matmul(&a, &b, m as usize, k as usize, n as usize);
        assert_eq!(c, want, "{name}: the recorded run itself is wrong");
    }
    dev.stop_recording().unwrap();
    let bytes = sink.bytes();
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.rknputrace"));
    std::fs::write(&path, &bytes).unwrap();
    eprintln!(
        "{name}: {} bytes recorded, kept at {}",
        bytes.len(),
        path.display()
    );
    Trace::from_bytes(&bytes).unwrap()
}

#[test]
fn a_recorded_matmul_replays_on_the_simulator_and_on_the_device() {
    let cases = [
        (
            MatmulSpec::new(64, 256, 128, Dtype::Int8),
            "hw-int8-64x256x128",
        ),
        (
            MatmulSpec::new(32, 256, 128, Dtype::Int4),
            "hw-int4-32x256x128",
        ),
        (
            MatmulSpec::new(32, 128, 64, Dtype::Fp16),
            "hw-fp16-32x128x64",
        ),
    ];
    for (spec, name) in cases {
        let t = record(spec, name, false);
        assert!(
            t.chunks.iter().any(|c| matches!(c, Chunk::Output { .. })),
            "{name}: no output recorded"
        );
        let check = replay_check(&t);
        assert!(check.is_match(), "{name}: {:#?}", check.mismatches);
        // The simulator against what the device computed.
        let model = replay_model(&t);
        assert!(
            model.is_match(),
            "{name}: the simulator differs from the device: {:#?}",
            model.mismatches
        );
        assert!(model.compared >= 2, "{name}: {model:?}");
        // The recording, relocated into new buffers, on the device again.
        let dev = super::dev();
        let hw = replay_hw(&t, &dev);
        assert!(hw.is_match(), "{name}: {:#?}", hw.mismatches);
        assert_eq!(
            dev.live_buffers(),
            0,
            "{name}: the replay frees its buffers"
        );
    }
}

#[test]
fn redacted_outputs_are_compared_by_digest() {
    let t = record(
        MatmulSpec::new(32, 128, 64, Dtype::Int8),
        "hw-int8-redacted",
        true,
    );
    let digests = t
        .chunks
        .iter()
        .filter(|c| {
            matches!(
                c,
                Chunk::Output {
                    contents: Contents::Digest { .. },
                    ..
                }
            )
        })
        .count();
    assert!(digests > 0, "no redacted output in {t:?}");
    assert!(
        !t.chunks.iter().any(|c| matches!(
            c,
            Chunk::Output {
                contents: Contents::Bytes(_),
                ..
            }
        )),
        "an output was recorded in full"
    );
    let r = replay_model(&t);
    assert!(r.is_match(), "{:#?}", r.mismatches);
    assert!(r.compared >= 2);
}
