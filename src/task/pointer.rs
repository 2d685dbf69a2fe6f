//! The ping-pong bits of a block's `S_POINTER` (pointer, executer, pointer mode), which a
//! task sets for every block it starts or for none.

use super::read::{DecodeError, Decoded, Reader};
use crate::error::Result;
use crate::regcmd::TaskBuilder;
use crate::regs::{CommandRegister, Field, dpu, dpu_rdma, ppu, ppu_rdma};

/// A block's `S_POINTER` register and its three ping-pong bits.
pub(super) trait PingPong: CommandRegister {
    /// `POINTER_PP_EN`, `EXECUTER_PP_EN`, `POINTER_PP_MODE`.
    const BITS: [Field<Self>; 3];
}

macro_rules! ping_pong {
    ($($t:ty),*) => {$(
        impl PingPong for $t {
            const BITS: [Field<Self>; 3] =
                [Self::POINTER_PP_EN, Self::EXECUTER_PP_EN, Self::POINTER_PP_MODE];
        }
    )*};
}

ping_pong!(
    dpu::SPointer,
    dpu_rdma::SPointer,
    ppu::SPointer,
    ppu_rdma::SPointer
);

/// Writes `S_POINTER` with the three bits set when `on` (nothing when off).
pub(super) fn emit<R: PingPong>(t: &mut TaskBuilder, on: bool) -> Result<()> {
    if on {
        let reg = R::BITS
            .iter()
            .try_fold(R::from_raw(0), |r, f| f.set(r, 1))?;
        t.write(reg);
    }
    Ok(())
}

/// Reads the three bits: all set (true) or all clear (false).
pub(super) fn decode<R: PingPong>(r: &mut Reader<'_>) -> Decoded<bool> {
    let v = R::BITS.map(|f| r.get(f));
    match v {
        [1, 1, 1] => Ok(true),
        [0, 0, 0] => Ok(false),
        _ => Err(DecodeError::unsupported(
            R::BITS[0],
            v[0],
            "ping-pong pointer, executer and pointer mode are set together or not at all",
        )),
    }
}
