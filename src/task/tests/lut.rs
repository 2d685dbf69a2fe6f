//! The LUT upload: a LUT task round-trips without it, and the body writes it through the
//! port.

use super::*;

fn lut_task(lut: Lut) -> Task {
    use crate::kernels::ops::lut::{Gate, lut_task, recipe};
    let r = recipe(Gate::Sigmoid);
    let mut t = lut_task(
        &r,
        4,
        2,
        DmaAddr::Fixed(0x1000),
        DmaAddr::Fixed(0x2000),
        false,
    );
    t.dpu.as_mut().unwrap().ew.as_mut().unwrap().lut = Some(lut);
    t
}

fn tables(seed: i16) -> LutTables {
    let mut t = LutTables {
        le: [0; LUT_ENTRIES],
        lo: [0; LUT_ENTRIES],
    };
    for i in 0..LUT_ENTRIES {
        t.le[i] = (i as i16).wrapping_mul(37).wrapping_add(seed);
        t.lo[i] = (i as i16).wrapping_mul(-91).wrapping_sub(seed);
    }
    t
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn a_lut_task_round_trips_without_its_upload(l in lut_block(), seed in any::<i16>()) {
        let plain = lut_task(l);
        prop_assert_eq!(&round_trip(&plain).unwrap(), &plain);
        // With an upload the register file is the same: the port is not state.
        let uploading = lut_task(l.with_upload(tables(seed)));
        prop_assert_eq!(&round_trip(&uploading).unwrap(), &plain);
    }
}

#[test]
fn the_upload_is_two_runs_of_513_port_writes_in_the_body() {
    let lut = Lut::hybrid(5).unwrap().with_upload(tables(3));
    let task = lut_task(lut);
    let body = task.body().unwrap();
    let e = body.entries();
    let cfg = dpu::LutAccessCfg::OFFSET;
    let data = dpu::LutAccessData::OFFSET;
    let starts: Vec<usize> = e
        .iter()
        .enumerate()
        .filter(|(_, x)| x.offset() == cfg)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(starts.len(), 2);
    assert_eq!(e[starts[0]].value(), 0x0002_0000);
    assert_eq!(e[starts[1]].value(), 0x0003_0000);
    assert_eq!(starts[1] - starts[0], 514);
    let t = tables(3);
    for i in 0..LUT_ENTRIES {
        assert_eq!(e[starts[0] + 1 + i].offset(), data);
        assert_eq!(e[starts[0] + 1 + i].value(), u32::from(t.le[i] as u16));
        assert_eq!(e[starts[1] + 1 + i].value(), u32::from(t.lo[i] as u16));
    }
    // Without an upload the port gets its two zero words, as in every DPU body.
    let plain = lut_task(lut.without_upload()).body().unwrap();
    let port: Vec<u32> = plain
        .entries()
        .iter()
        .filter(|x| x.offset() == cfg || x.offset() == data)
        .map(|x| x.value())
        .collect();
    assert_eq!(port, vec![0, 0]);
    // LUT_CFG of the hybrid configuration is the 0x68 of every program that ran.
    let lut_cfg = plain
        .entries()
        .iter()
        .find(|x| x.offset() == dpu::LutCfg::OFFSET)
        .unwrap()
        .value();
    assert_eq!(lut_cfg, 0x68);
}
