//! Device-address allocation as the kernels do it: the vendor driver's IOMMU domain and
//! rocket's per-fd `drm_mm` both hand a freed range out again, so an address a job still
//! uses may belong to another buffer after a free (docs/device.md, "Kernel behaviours").

/// A range allocator over `[base, limit)` that reuses freed ranges first (first fit) and
/// otherwise grows from one end.
#[derive(Debug)]
pub(super) struct Iova {
    /// Free ranges `(start, size)` returned by [`Iova::free`].
    holes: Vec<(u64, u64)>,
    /// The untouched part of the space: `[low, high)`.
    low: u64,
    high: u64,
    /// Whether fresh ranges come from the top (vendor) or the bottom (rocket).
    top_down: bool,
    /// Bytes handed out and not yet given back.
    in_use: u64,
}

impl Iova {
    /// The vendor domain: top-down from 4 GiB.
    pub(super) fn top_down() -> Iova {
        Iova {
            holes: Vec::new(),
            low: 0,
            high: 1 << 32,
            top_down: true,
            in_use: 0,
        }
    }

    /// A rocket fd's space: 4 GiB bottom-up from `base` (0 behind the Rockchip IOMMU).
    pub(super) fn bottom_up(base: u64) -> Iova {
        Iova {
            holes: Vec::new(),
            low: base,
            high: base.saturating_add(1 << 32),
            top_down: false,
            in_use: 0,
        }
    }

    /// A range of `size` bytes, a freed one first; `None` when the space is exhausted.
    pub(super) fn alloc(&mut self, size: u64) -> Option<u64> {
        let start = self.take(size)?;
        self.in_use += size;
        Some(start)
    }

    fn take(&mut self, size: u64) -> Option<u64> {
        if let Some(i) = self.holes.iter().position(|&(_, len)| len >= size) {
            let (start, len) = self.holes[i];
            if len == size {
                self.holes.remove(i);
            } else {
                self.holes[i] = (start + size, len - size);
            }
            return Some(start);
        }
        if self.high - self.low < size {
            return None;
        }
        Some(if self.top_down {
            self.high -= size;
            self.high
        } else {
            self.low += size;
            self.low - size
        })
    }

    /// Gives a range back for reuse.
    pub(super) fn free(&mut self, start: u64, size: u64) {
        self.in_use = self.in_use.saturating_sub(size);
        self.holes.push((start, size));
    }

    /// Bytes handed out and not yet given back.
    pub(super) fn in_use(&self) -> u64 {
        self.in_use
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_ranges_are_handed_out_again() {
        let mut v = Iova::top_down();
        let a = v.alloc(4096).unwrap();
        let b = v.alloc(8192).unwrap();
        assert_eq!((a, b), ((1 << 32) - 4096, (1 << 32) - 12288));
        v.free(b, 8192);
        assert_eq!(v.alloc(4096), Some(b), "the freed range first");
        assert_eq!(v.alloc(4096), Some(b + 4096));
        assert_eq!(v.alloc(4096), Some(b - 4096), "then fresh space");
        assert_eq!(v.in_use(), 4096 + 3 * 4096);
        let mut r = Iova::bottom_up(0);
        assert_eq!(r.alloc(4096), Some(0));
        assert_eq!(r.alloc(1 << 33), None);
    }
}
