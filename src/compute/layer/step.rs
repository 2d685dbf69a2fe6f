//! Steps of any operation of the `Op` contract, its roles bound to layer tensors.

use super::{LayerBuilder, Tensor};
use crate::error::{Error, Result};
use crate::kernels::ops::contract::{self, Access, Bindings, Op, Role};
use crate::regcmd::DmaAddr;

/// Where an operation's scratch starts after its output: whole 64-byte lines.
const SCRATCH_ALIGN: u64 = 64;

impl LayerBuilder {
    /// A step running `op`, each of its input roles reading the layer tensor `inputs`
    /// names for it (a tensor may serve several roles); returns the tensor it writes,
    /// its output port's cube. The operation's constants (a LUT operand, packed
    /// parameters) become constants of the layer, written once; its scratch (a
    /// multi-pass pool's intermediates) lives in the output tensor's buffer, past the
    /// output cube, so [`Layer::read`](super::Layer::read) of it returns the cube's bytes
    /// first. Errors, before anything is built: a role `op` reads that `inputs` does not
    /// give, a role it does not read, a role given twice, or a tensor smaller than the
    /// port ([`Error::InvalidArgument`], naming the role); a tensor of another builder
    /// ([`Error::Foreign`]); an operation without exactly one output
    /// ([`Error::Unsupported`]).
    pub fn step<O: Op + 'static>(
        &mut self,
        name: &str,
        op: O,
        inputs: &[(Role, Tensor)],
    ) -> Result<Tensor> {
        let what = |why: String| Error::InvalidArgument {
            what: format!("step {name} ({}): {why}", op.describe()),
        };
        for (i, (role, _)) in inputs.iter().enumerate() {
            if inputs[..i].iter().any(|(r, _)| r == role) {
                return Err(what(format!("the {role} is given twice")));
            }
        }
        let ports = op.ports()?;
        let out = contract::output(&ports)?.clone();
        let mut roles = Vec::new();
        let mut reads = Vec::new();
        let mut scratch = None;
        for p in &ports {
            match &p.access {
                Access::Read => {
                    let Some(&(_, t)) = inputs.iter().find(|(r, _)| *r == p.role) else {
                        return Err(what(format!("no tensor for the {}", p.role)));
                    };
                    let have = self.def(t)?.bytes;
                    if have < p.bytes {
                        return Err(what(format!(
                            "the {} is {have} bytes, the operation reads {}",
                            p.role, p.bytes
                        )));
                    }
                    roles.push(p.role);
                    reads.push(t);
                }
                Access::Constant(bytes) => {
                    let t = self.constant(&format!("{name}: {}", p.role), bytes.clone())?;
                    roles.push(p.role);
                    reads.push(t);
                }
                Access::Scratch => scratch = Some(p.bytes),
                Access::Write => {}
            }
        }
        if let Some((role, _)) = inputs.iter().find(|(r, _)| !roles.contains(r)) {
            return Err(what(format!("the operation does not read a {role}")));
        }
        let scratch_at = out.bytes.div_ceil(SCRATCH_ALIGN) * SCRATCH_ALIGN;
        let bytes = match scratch {
            Some(s) => scratch_at + s,
            None => out.bytes,
        };
        let generate = move |addrs: &[DmaAddr], at: DmaAddr| {
            let mut b = Bindings::new().bind(Role::Output, at);
            for (&role, &addr) in roles.iter().zip(addrs) {
                b = b.bind(role, addr);
            }
            if scratch.is_some() {
                let by = u32::try_from(scratch_at).map_err(|_| Error::Unsupported {
                    what: "layer step",
                    why: format!("an output of {scratch_at} bytes before its scratch"),
                })?;
                b = b.bind(Role::Scratch, crate::kernels::ops::eltwise::offset(at, by)?);
            }
            op.tasks(&b)
        };
        self.op_bytes(name, &reads, bytes, out.cube, Box::new(generate))
    }
}
