//! Writing the format: chunks as they are recorded, and whole traces.

use super::{Chunk, Contents, Header, MAGIC, Trace};

impl Chunk {
    /// Appends the chunk's encoding to `out` (nothing for [`Chunk::Unknown`], whose
    /// payload was not kept). A file is [`Header::start_bytes`] followed by chunks, so a
    /// recorder can stream them.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        let mut w = Writer(std::mem::take(out));
        self.put(&mut w);
        *out = w.0;
    }

    fn put(&self, w: &mut Writer) {
        let mut p = Writer(Vec::new());
        let kind: &[u8; 4] = match self {
            Chunk::Buffer {
                id,
                flags,
                size,
                dma_addr,
            } => {
                p.u32(*id);
                p.u32(*flags);
                p.u64(*size);
                p.u32(*dma_addr);
                b"BUFC"
            }
            Chunk::Data {
                id,
                offset,
                contents,
            } => {
                p.u32(*id);
                p.u64(*offset);
                p.contents(contents);
                b"BUFD"
            }
            Chunk::Output {
                id,
                submit,
                offset,
                contents,
            } => {
                p.u32(*id);
                p.u32(*submit);
                p.u64(*offset);
                p.contents(contents);
                b"OUTD"
            }
            Chunk::Reloc {
                buffer,
                entry,
                target,
                offset,
            } => {
                p.u32(*buffer);
                p.u64(*entry);
                p.u32(*target);
                p.u32(*offset);
                b"RELO"
            }
            Chunk::Submit(sub) => {
                p.u32(sub.id);
                p.u32(sub.flags);
                p.u32(sub.core_mask);
                p.u32(sub.timeout_ms);
                p.u32(sub.ranges.len() as u32);
                for (s, n) in &sub.ranges {
                    p.u32(*s);
                    p.u32(*n);
                }
                p.u32(sub.tasks.len() as u32);
                for t in &sub.tasks {
                    p.u32(t.buffer);
                    p.u32(t.task.offset);
                    p.u32(t.task.regcfg_amount);
                    p.u32(t.task.int_mask);
                    p.u32(t.task.enable);
                }
                b"SUBM"
            }
            Chunk::Done(d) => {
                p.u32(d.id);
                p.u8(u8::from(d.ok));
                p.u32(d.errno as u32);
                p.u32(d.task_counter);
                p.u64(d.elapsed_ns);
                p.u32(d.statuses.len() as u32);
                for s in &d.statuses {
                    p.u32(*s);
                }
                b"DONE"
            }
            Chunk::Free { id } => {
                p.u32(*id);
                b"FREE"
            }
            Chunk::Note(s) => {
                p.str(s);
                b"NOTE"
            }
            // Unknown chunks carry no payload of their own: they are not written back.
            Chunk::Unknown { .. } => return,
        };
        w.chunk(kind, p);
    }
}

impl Header {
    /// The first bytes of a file: the magic and this `HEAD` chunk.
    pub fn start_bytes(&self) -> Vec<u8> {
        let mut w = Writer(MAGIC.to_vec());
        let mut p = Writer(Vec::new());
        p.u16(self.version);
        p.str(&self.soc);
        p.u8(self.interface);
        p.str(&self.driver);
        p.u8(u8::from(self.emulated));
        w.chunk(b"HEAD", p);
        w.0
    }
}

impl Trace {
    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.header.start_bytes();
        for c in &self.chunks {
            c.write_to(&mut out);
        }
        out
    }
}

/// A growing little-endian payload.
struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
    }
    fn contents(&mut self, c: &Contents) {
        match c {
            Contents::Bytes(b) => {
                self.u8(0);
                self.u64(b.len() as u64);
                self.0.extend_from_slice(b);
            }
            Contents::Digest { len, digest, seed } => {
                self.u8(1);
                self.u64(*len);
                self.u64(*digest);
                self.u64(*seed);
            }
        }
    }
    fn chunk(&mut self, kind: &[u8; 4], payload: Writer) {
        self.0.extend_from_slice(kind);
        self.u64(payload.0.len() as u64);
        self.0.extend_from_slice(&payload.0);
    }
}
