//! Fuzzes layer programs: a small layer described by the input (inputs, constants,
//! add steps whose tasks may be wider than the tensors they declare, matmul steps over
//! small weight banks of this device or of another, handles of another builder, outputs)
//! is built on the emulated kernel. The build never panics; an error is one of the
//! library's typed refusals; every layer that builds runs, its outputs read back at
//! their declared sizes; and nothing leaks on either device.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rknpu_driver::Error;
use rknpu_driver::compute::layer::{LayerBuilder, MatmulInput, Tensor};
use rknpu_driver::compute::matmul::WeightBank;
use rknpu_driver::compute::matmul::Weights;
use rknpu_driver::device::Device;
use rknpu_driver::kernels::matmul::Plan;
use rknpu_driver::kernels::ops::Cube;
use rknpu_driver::kernels::single::{OutType, add_task};
use rknpu_driver::regcmd::DmaAddr;
use rknpu_driver::task::Precision;
use std::sync::{Arc, OnceLock};

/// Steps (and tensors) of one layer at most: enough for reuse, small enough to be fast.
const MAX_OPS: usize = 12;

/// The layer's device and another open of the emulated NPU.
fn devices() -> &'static (Device, Device) {
    static DEVS: OnceLock<(Device, Device)> = OnceLock::new();
    DEVS.get_or_init(|| {
        let open = || Device::open_spec("emu").expect("the emulated kernel opens");
        (open(), open())
    })
}

/// The input, read a byte at a time (zeros once it runs out).
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn next(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// An int32 cube (sometimes of another precision) of up to 16 pixels and 64 channels;
/// channel counts that are not multiples of 4 give adds the recipe refuses.
fn cube(d: &mut Bytes<'_>) -> Option<Cube> {
    let width = u32::from(d.next() % 16) + 1;
    let channels = u32::from(d.next() % 64) + 1;
    let precision = match d.next() % 8 {
        0 => Precision::Int8,
        1 => Precision::Fp16,
        _ => Precision::Int32,
    };
    Cube::new(width, 1, channels, precision).ok()
}

/// The errors a layer description may be refused with.
fn typed(e: &Error) -> bool {
    matches!(
        e,
        Error::InvalidArgument { .. }
            | Error::Unsupported { .. }
            | Error::ShapeMismatch { .. }
            | Error::Foreign { .. }
            | Error::LayerStep { .. }
            | Error::Verify { .. }
            | Error::Precision { .. }
            | Error::FieldOverflow { .. }
            | Error::OutOfRange { .. }
    )
}

fuzz_target!(|data: &[u8]| {
    let (dev, other) = devices();
    let before = (dev.live_buffers(), other.live_buffers());
    run(dev, other, &mut Bytes(data));
    assert_eq!(
        (dev.live_buffers(), other.live_buffers()),
        before,
        "a buffer leaked"
    );
});

/// A layer being described: its builder, a builder of its own whose handles the layer
/// must refuse, the tensors so far, the inputs to fill (with their sizes in bytes) and
/// the tensors marked as outputs.
struct Description<'a> {
    dev: &'a Device,
    other: &'a Device,
    b: LayerBuilder,
    foreign: LayerBuilder,
    tensors: Vec<Tensor>,
    inputs: Vec<(Tensor, u64)>,
    outputs: Vec<Tensor>,
}

impl<'a> Description<'a> {
    /// An empty layer on `dev`; `other` is the second device a bank may come from.
    fn new(dev: &'a Device, other: &'a Device) -> Description<'a> {
        Description {
            dev,
            other,
            b: LayerBuilder::new(dev),
            foreign: LayerBuilder::new(dev),
            tensors: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
        }
    }

    /// One of the tensors so far, chosen by the next byte (which is read even when there
    /// are none).
    fn pick(&self, d: &mut Bytes<'_>) -> Option<Tensor> {
        self.tensors
            .get(d.next() as usize % self.tensors.len().max(1))
            .copied()
    }

    /// One step of the description, its kind chosen by the next byte.
    fn step(&mut self, d: &mut Bytes<'_>) -> Result<(), Error> {
        match d.next() % 8 {
            0 | 1 => self.input(d),
            2 => self.constant(d),
            3 | 4 => self.add(d),
            5 => self.matmul(d),
            6 => {
                self.foreign_handle(d);
                Ok(())
            }
            _ => self.output(d),
        }
    }

    /// An input cube, or raw input bytes.
    fn input(&mut self, d: &mut Bytes<'_>) -> Result<(), Error> {
        cube(d).map_or(Ok(()), |c| {
            let t = if d.next().is_multiple_of(2) {
                self.b.input("in", c)
            } else {
                self.b.input_bytes("in", c.bytes() as usize)
            };
            t.map(|t| {
                self.tensors.push(t);
                self.inputs.push((t, c.bytes()));
            })
        })
    }

    /// Constant bytes (an empty constant is refused).
    fn constant(&mut self, d: &mut Bytes<'_>) -> Result<(), Error> {
        let len = usize::from(d.next()) * 4;
        self.b
            .constant("const", vec![0x11; len])
            .map(|t| self.tensors.push(t))
    }

    /// An add of two tensors into a declared cube; its task's own geometry, from the
    /// input too, may be wider than what it declares or reads.
    fn add(&mut self, d: &mut Bytes<'_>) -> Result<(), Error> {
        let x = self.pick(d);
        let y = self.pick(d);
        match (x, y, cube(d)) {
            (Some(x), Some(y), Some(out)) => {
                let (rows, channels) = (u32::from(d.next() % 20) + 1, u32::from(d.next()) * 4);
                let generate = move |ins: &[DmaAddr], o: DmaAddr| {
                    let at = |i: usize| ins.get(i).copied().unwrap_or(o);
                    Ok(vec![add_task(rows, channels, at(0), at(1), o)?])
                };
                self.b
                    .op("add", &[x, y], out, generate)
                    .map(|t| self.tensors.push(t))
            }
            _ => Ok(()),
        }
    }

    /// A matmul step against a small bank, of this device or of the other.
    fn matmul(&mut self, d: &mut Bytes<'_>) -> Result<(), Error> {
        let (n, k) = (
            32 * u32::from(d.next() % 2 + 1),
            32 * u32::from(d.next() % 3 + 1),
        );
        let m = u32::from(d.next() % 4) + 1;
        let on = if d.next().is_multiple_of(4) {
            self.other
        } else {
            self.dev
        };
        let w: Vec<i8> = (0..n * k).map(|i| (i % 7) as i8 - 3).collect();
        let bank = WeightBank::new(on, (n, k), Weights::I8(&w)).map(Arc::new);
        let plan = bank
            .as_ref()
            .ok()
            .and_then(|bk| Plan::for_layout(bk.layout(), m, OutType::Int32, 1).ok());
        match (bank, plan) {
            (Ok(bank), Some(plan)) => self.matmul_step(d, &bank, &plan, m),
            (Err(e), _) => Err(e),
            _ => Ok(()),
        }
    }

    /// The matmul step of `m` rows against `bank`: its packed A (following `plan`) a new
    /// input or (not always big enough) a tensor already there, read packed or native.
    fn matmul_step(
        &mut self,
        d: &mut Bytes<'_>,
        bank: &Arc<WeightBank>,
        plan: &Plan,
        m: u32,
    ) -> Result<(), Error> {
        let a = match d.next() % 2 {
            0 => self
                .b
                .input_bytes("x", plan.a_bytes as usize)
                .inspect(|&t| {
                    self.inputs.push((t, plan.a_bytes));
                }),
            _ => self.pick(d).ok_or(Error::EmptyInput),
        };
        let input = match d.next() % 2 {
            0 => MatmulInput::Packed,
            _ => MatmulInput::Native,
        };
        a.and_then(|a| self.b.matmul("mm", bank, a, m, OutType::Int32, input))
            .map(|t| self.tensors.push(t))
            .or_else(|e| {
                if matches!(e, Error::EmptyInput) {
                    Ok(())
                } else {
                    Err(e)
                }
            })
    }

    /// A handle of another builder, read by a step or marked as an output: both refused
    /// as foreign.
    fn foreign_handle(&mut self, d: &mut Bytes<'_>) {
        let x = cube(d).map(|c| self.foreign.input("elsewhere", c));
        if let (Some(Ok(x)), Some(y)) = (x, self.pick(d)) {
            let e = self.b.op(
                "foreign",
                &[y, x],
                Cube::new(1, 1, 4, Precision::Int32).unwrap(),
                |_, _| Ok(vec![]),
            );
            assert!(matches!(e, Err(Error::Foreign { .. })), "{e:?}");
            let e = self.b.output(x);
            assert!(matches!(e, Err(Error::Foreign { .. })), "{e:?}");
        }
    }

    /// Marks a tensor as an output.
    fn output(&mut self, d: &mut Bytes<'_>) -> Result<(), Error> {
        match self.pick(d) {
            Some(t) => self.b.output(t).map(|()| self.outputs.push(t)),
            None => Ok(()),
        }
    }
}

/// Describes a layer from the input, builds it and, if it builds, fills its inputs,
/// runs it and reads its outputs back.
fn run(dev: &Device, other: &Device, d: &mut Bytes<'_>) {
    let mut desc = Description::new(dev, other);
    for _ in 0..MAX_OPS {
        if d.is_empty() {
            break;
        }
        if let Err(e) = desc.step(d) {
            assert!(typed(&e), "an untyped refusal while describing: {e:?}");
        }
    }
    let Description {
        b, inputs, outputs, ..
    } = desc;
    let mut layer = match b.build() {
        Ok(layer) => layer,
        Err(e) => {
            assert!(typed(&e), "an untyped refusal at build: {e:?}");
            return;
        }
    };
    for &(t, bytes) in &inputs {
        let fill = vec![d.next(); bytes as usize];
        layer
            .write(t, &fill)
            .expect("an input of the layer takes its bytes");
    }
    layer.run().expect("a layer that builds runs");
    for t in outputs {
        let info = layer.tensor(t).expect("the layer's own tensor").clone();
        match layer.read(t) {
            Ok(bytes) => assert_eq!(bytes.len() as u64, info.bytes),
            // An input marked as an output is read only when a step writes it.
            Err(e) => assert!(typed(&e), "{e:?}"),
        }
    }
}
