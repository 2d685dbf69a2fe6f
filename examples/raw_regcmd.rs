//! A regcmd program built by hand, without the matmul planner: one int8 matmul task
//! `C[M×N] = A[M×K] · Bᵀ` (B given as N rows of K) described as typed block values
//! (`rknpu_driver::task`), emitted into register writes, turned into a program, bound to
//! the device addresses of buffers this example allocates, submitted, and its result read
//! back and checked exactly against the CPU.
//!
//! This is the layer under `compute::matmul`: what a new operation would start from. The
//! task is a 1×1 convolution — the M rows of A are pixels, K is the channel count, the N
//! rows of B are kernels — with the values of the board-validated matmul programs
//! (docs/provenance.md); `kernels::single::SingleMatmul` builds the same task from a
//! shape. The operand layouts are those of docs/matmul.md and `kernels::single`:
//!
//! * A row-major, each row padded to `KP` (K rounded up to 32) bytes;
//! * B in 1024-byte weight atoms of 32 kernels × 32 channels, `[N/32][KP/32][32][32]`;
//! * C row-major int32, each row padded to `NP` (N rounded up to 32) values.
//!
//! It opens a board if there is one and the emulated kernel (the simulator) otherwise,
//! prints the decoded program's summary and the job's result, exits non-zero if a value
//! differs, and prints `OK` last. Run it with:
//!
//! ```text
//! cargo run --release --example raw_regcmd
//! ```

use rknpu_driver::device::{Bo, BoFlags, Device, Job};
use rknpu_driver::regcmd::{BufferId, DmaAddr, ProgramBuilder, words_to_le_bytes};
use rknpu_driver::seeded::Rng;
use rknpu_driver::task::{
    Cbuf, Cna, Conv, Core, Dpu, DpuInput, Feature, InputCvt, Kernel, OutCvt, Output, OwCfg,
    Precision, Stage, Task, Weights, cbuf,
};
use std::error::Error;
use std::process::ExitCode;

/// Rows of A and C.
const M: u32 = 8;
/// Columns of A and of B's rows: the reduction.
const K: u32 = 96;
/// Rows of B, columns of C.
const N: u32 = 64;
/// K padded to whole weight atoms of 32 channels.
const KP: u32 = K.div_ceil(32) * 32;
/// N padded to whole groups of 32 int8 kernels.
const NP: u32 = N.div_ceil(32) * 32;

/// The buffers the program names. Addresses are not known when the program is built:
/// each DMA register holds a relocation (buffer + offset), bound at the end.
const REGCMD: BufferId = BufferId(0);
/// Activations A.
const A: BufferId = BufferId(1);
/// Weights B.
const B: BufferId = BufferId(2);
/// Result C.
const C: BufferId = BufferId(3);

/// What C holds before the job, so that values the NPU did not write show.
const FILL: u8 = 0xA5;

/// The example's result type.
type Res<T = ()> = Result<T, Box<dyn Error>>;

/// The task, block by block.
fn matmul_task() -> Res<Task> {
    let p = Precision::Int8;
    // A's rows in the CBUF: one line of KP int8 channels per row, in 64-byte entries.
    let row_bytes = u64::from(KP) * u64::from(p.bits()) / 8;
    let data_banks = 1;
    let out = Precision::Int32;
    // The DPU values every board-validated int8 → int32 program uses.
    let size_e = Dpu::validated_size_e(p, out)
        .ok_or("no validated output-line channel groups for int8 → int32")?;
    let surface_ratio = Dpu::validated_surface_ratio(p, out)
        .ok_or("no validated surface ratio for int8 → int32")?;
    let cna = Cna {
        core_split: 0,
        precision: p,
        // The feature cube: 1 pixel wide, M lines high, KP channels.
        feature: Feature {
            addr: DmaAddr::reloc(A, 0),
            width: 1,
            height: M,
            channels: KP,
            channels_real: KP,
            // One line per row of A: KP bytes, in 16-byte atoms, fetched line by line.
            line_stride: KP * p.bits() / 128,
            surf_stride: 0,
            group_line_off: true,
            grains: M + 1,
            planar_width: None,
        },
        weights: Weights {
            addr: DmaAddr::reloc(B, 0),
            kernels: NP,
        },
        conv: Conv {
            out_width: 1,
            out_atomics: M,
            stride: (1, 1),
        },
        kernel: Kernel::default(),
        // The 12 CBUF banks: A fits one, the other 11 hold weights.
        cbuf: Cbuf {
            data_banks,
            weight_banks: cbuf::BANKS - data_banks,
            fc_data_banks: 0,
            data_reuse: false,
            weight_reuse: false,
            data_entries: u32::try_from(row_bytes.div_ceil(cbuf::ENTRY_BYTES))?,
        },
        cvt: InputCvt::bypassed(true),
        burst: (15, 15),
    };
    let core = Core {
        precision: p,
        qd_en: true,
        depthwise: false,
        out: (1, M, NP),
    };
    let dpu = Dpu {
        depthwise: false,
        ping_pong: true,
        input: DpuInput::Core,
        burst_len: 15,
        precision: p,
        cube: (1, M, NP),
        orig_channels: NP,
        // No bias, scale or activation: the int32 sums go straight to memory.
        bs: Stage::BYPASSED,
        bn: Stage::BYPASSED,
        ew: None,
        ow: OwCfg {
            od_bypass: false,
            size_e: [size_e; 3],
            ow_src: 0,
            ow_op: 0,
        },
        out_cvt: OutCvt::IDENTITY,
        // C row-major: 16-byte surfaces of 4 int32 one after the other, so a row of NP
        // values is NP/4 atoms and the next row follows it.
        out: Output {
            addr: DmaAddr::reloc(C, 0),
            precision: out,
            surf_stride: 1,
            notch: NP / out.atom_elems() - 1,
            surface_add: surface_ratio,
        },
    };
    Ok(Task {
        cna: Some(cna),
        core: Some(core),
        dpu: Some(dpu),
        dpu_rdma: None,
        ppu: None,
        ppu_rdma: None,
    })
}

/// `len` seeded int8 values.
fn int8_values(seed: u64, len: usize) -> Vec<i8> {
    let mut rng = Rng::from_seed(seed);
    // `int` returns a value in −128..=127, which always fits an i8.
    (0..len).map(|_| rng.int(-128, 127) as i8).collect()
}

/// A (M rows of K) row-major with each row padded to KP.
fn pack_a(a: &[i8]) -> Vec<u8> {
    let mut out = vec![0u8; (M * KP) as usize];
    for (m, row) in a.chunks_exact(K as usize).enumerate() {
        for (k, &v) in row.iter().enumerate() {
            out[m * KP as usize + k] = v as u8;
        }
    }
    out
}

/// B (N rows of K) in weight atoms: atom `(n / 32, k / 32)` holds 32 kernels of 32
/// channels, kernel-major.
fn pack_b(b: &[i8]) -> Vec<u8> {
    let mut out = vec![0u8; (NP * KP) as usize];
    let atoms_per_group = (KP / 32) as usize;
    for (n, row) in b.chunks_exact(K as usize).enumerate() {
        for (k, &v) in row.iter().enumerate() {
            let atom = (n / 32) * atoms_per_group + k / 32;
            out[atom * 1024 + (n % 32) * 32 + k % 32] = v as u8;
        }
    }
    out
}

/// A buffer holding `bytes`.
fn upload(dev: &Device, bytes: &[u8]) -> Res<Bo> {
    let mut bo = dev.alloc(bytes.len(), BoFlags::default())?;
    bo.write(0, bytes)?;
    Ok(bo)
}

fn run() -> Res {
    let dev = Device::open_or_emulated()?;
    println!("device: {}", dev.info());

    // The task as values, its register writes, and the program: a body and the tail
    // that starts CNA, CORE and DPU and signals completion.
    let task = matmul_task()?;
    let mut builder = ProgramBuilder::new(REGCMD);
    builder.push_task(task.body()?, task.enable());
    let program = builder.build()?;

    // What the program is, decoded back from its words.
    let decoded = program.decode();
    for t in &decoded.tasks {
        let enable = t
            .enable
            .map_or_else(|| "none".to_string(), |e| e.to_string());
        println!(
            "program task {}: {} register writes, op-enable {enable}",
            t.index, t.body_len
        );
    }
    let relocated = decoded.entries.iter().filter(|e| e.reloc.is_some()).count();
    println!(
        "program: {} entries ({} bytes), {relocated} relocated addresses, {} unknown",
        decoded.entries.len(),
        program.byte_len(),
        decoded.unknown()
    );

    // Operands, packed and in device memory.
    let a = int8_values(1, (M * K) as usize);
    let b = int8_values(2, (N * K) as usize);
    let a_bo = upload(&dev, &pack_a(&a))?;
    let b_bo = upload(&dev, &pack_b(&b))?;
    let mut c_bo = upload(&dev, &vec![FILL; (M * NP * 4) as usize])?;

    // Bind the relocations to the buffers' device addresses and upload the words.
    let mut regcmd = dev.alloc(program.byte_len(), BoFlags::default())?;
    let own = regcmd.dma_addr();
    let words = program.bind(|id| match id {
        REGCMD => Some(u64::from(own)),
        A => Some(u64::from(a_bo.dma_addr())),
        B => Some(u64::from(b_bo.dma_addr())),
        C => Some(u64::from(c_bo.dma_addr())),
        _ => None,
    })?;
    regcmd.write(0, &words_to_le_bytes(&words))?;

    // The job: the program's tasks and the buffers they read and write (the pre-submit
    // verifier checks every DMA range of the task against them).
    let job = Job::from_program(&regcmd, &program)
        .reads(&a_bo)
        .reads(&b_bo)
        .writes(&c_bo);
    let result = dev.submit(&job)?;
    println!(
        "job: {} task(s) completed{}",
        result.task_counter,
        result.hw_elapsed.map_or(String::new(), |t| format!(
            ", {} µs on the NPU",
            t.as_micros()
        ))
    );

    // C back, against the CPU.
    let c = c_bo.read_all()?;
    for m in 0..M as usize {
        for n in 0..N as usize {
            let at = (m * NP as usize + n) * 4;
            let got = i32::from_le_bytes([c[at], c[at + 1], c[at + 2], c[at + 3]]);
            let want: i32 = (0..K as usize)
                .map(|k| i32::from(a[m * K as usize + k]) * i32::from(b[n * K as usize + k]))
                .sum();
            if got != want {
                return Err(format!("C[{m}][{n}] is {got} on the NPU, {want} on the CPU").into());
            }
        }
    }
    println!("C: {M}x{N} int32 results equal the CPU's");
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => {
            println!("OK");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
