//! Recording what a device does as a trace (docs/trace-format.md): the device side of
//! [`crate::trace::Recorder`], which it feeds buffers, contents and submissions.

use super::bo::BoMeta;
use super::{CoreMask, Device, Error, Interface, Job, JobResult, Result};
use crate::submit::{self, BufferTask};
use crate::sys::Errno;
use crate::trace::{DoneRecord, Header, Recorder, SubmitRecord};
use std::sync::atomic::{AtomicUsize, Ordering};

impl Device {
    /// Records everything this device does from now on into `sink` as a trace
    /// (docs/trace-format.md): buffers alive now and later, the contents the program
    /// puts in them before each submission, the submissions, their completions and the
    /// contents they leave. Setting `RKNPU_TRACE=FILE` does the same for every device a
    /// program opens (the first device writes FILE, later ones FILE.1, FILE.2, ...).
    pub fn start_recording(&self, sink: Box<dyn std::io::Write + Send>) -> Result<()> {
        let r = Recorder::new(sink, &self.trace_header()).map_err(|e| Error::Trace {
            what: e.to_string(),
        })?;
        self.record_with(r)
    }

    /// The header a trace of this device starts with (for [`Recorder::new`]).
    pub fn trace_header(&self) -> Header {
        let info = &self.inner.info;
        let (major, minor, patch) = info.version;
        Header::new(
            "RK3588",
            // The format's interface byte: 0 vendor, 1 rocket.
            u8::from(info.interface == Interface::Rocket),
            &format!("{} {major}.{minor}.{patch}", info.driver),
            info.emulated,
        )
    }

    /// [`Device::start_recording`] with a recorder set up by the caller, e.g. one that
    /// records outputs as digests only. A recording already running is stopped first.
    /// Buffers alive when recording starts are recorded with allocation flags 0 (the
    /// device does not keep them); their contents are recorded at the next submission.
    ///
    /// ```
    /// use rknpu_driver::device::Device;
    /// use rknpu_driver::trace::Recorder;
    ///
    /// let dev = Device::open_spec("emu")?;
    /// let mut r = Recorder::new(Box::new(std::io::sink()), &dev.trace_header())?;
    /// r.redact_outputs(true);
    /// dev.record_with(r)?;
    /// assert!(dev.is_recording());
    /// dev.stop_recording()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn record_with(&self, mut r: Recorder) -> Result<()> {
        let live: Vec<(u32, BoMeta)> = {
            let h = self.handles();
            let mut v: Vec<_> = h.iter().map(|(&k, &m)| (k, m)).collect();
            v.sort_by_key(|&(k, _)| k);
            v
        };
        for (handle, m) in live.into_iter().filter(|(_, m)| m.traced) {
            r.buffer_created(handle, 0, m.size as u64, m.dma);
            // What the CPU put in it before now is not in the trace yet.
            self.note_cpu_write(handle);
        }
        // A recording already running ends here, flushed, with its error if it had one.
        match self.recording().replace(r) {
            Some(mut old) => old.finish().map_err(|e| Error::Trace {
                what: format!("the previous recording: {e}"),
            }),
            None => Ok(()),
        }
    }

    /// [`Device::start_recording`] into a new file at `path`.
    pub fn record_to_file(&self, path: &std::path::Path) -> Result<()> {
        let f = std::fs::File::create(path).map_err(|e| Error::Trace {
            what: format!("{}: {e}", path.display()),
        })?;
        self.start_recording(Box::new(std::io::BufWriter::new(f)))
    }

    /// Stops recording and flushes the trace; reports the first write error of the
    /// recording. Dropping the device stops it too (and reports an error on stderr, the
    /// only place left to say it).
    pub fn stop_recording(&self) -> Result<()> {
        match self.recording().take() {
            Some(mut r) => r.finish().map_err(|e| Error::Trace {
                what: e.to_string(),
            }),
            None => Ok(()),
        }
    }

    /// Whether a trace is being recorded.
    pub fn is_recording(&self) -> bool {
        self.recording().is_some()
    }

    /// The CPU may have changed a buffer: the next submission's trace reads it.
    pub(super) fn note_cpu_write(&self, handle: u32) {
        if let Some(m) = self.handles().get_mut(&handle) {
            m.cpu_written = true;
        }
    }

    /// A recorded buffer's contents, synced for the CPU when the device may have written
    /// it (`after_job`) and handed back afterwards. Before a job only buffers the CPU may
    /// have written since the last read are read (`None` for the others: unchanged).
    fn trace_contents(&self, handle: u32, after_job: bool) -> Option<Vec<u8>> {
        let m = {
            let mut handles = self.handles();
            let m = handles.get_mut(&handle)?;
            if !m.traced || !(after_job || m.cpu_written || m.exported) {
                return None;
            }
            m.cpu_written = false;
            *m
        };
        if after_job {
            self.inner.backend.to_cpu(self, handle, &m).ok()?;
        }
        let bytes = self
            .inner
            .port
            .mmap(m.size, m.mmap_offset)
            .ok()
            .map(|map| map.as_slice().to_vec());
        if after_job {
            let _ = self.inner.backend.to_device(self, handle, &m);
        }
        bytes
    }

    /// Records a submission in the trace being recorded, if any; its trace id.
    pub(super) fn trace_submit(&self, job: &Job<'_>, nonblocking: bool) -> Option<u32> {
        let mut guard = self.recording();
        let r = guard.as_mut()?;
        let n = job.tasks.len() as u32;
        let ranges = match job.cores {
            CoreMask::Auto => vec![(0, n)],
            _ => submit::ranges(&job.split),
        };
        let record = SubmitRecord {
            flags: self.inner.backend.submit_flags(nonblocking),
            core_mask: job.cores.bits(),
            timeout_ms: job.timeout.as_millis().min(u32::MAX as u128) as u32,
            ranges,
            tasks: job
                .tasks
                .iter()
                .map(|&task| BufferTask {
                    buffer: job.regcmd.handle(),
                    task,
                })
                .collect(),
            writes: job.writes.iter().map(|b| b.handle()).collect(),
        };
        Some(r.submit(&record, &mut |h| self.trace_contents(h, false)))
    }

    /// Records how a traced submission ended and what it left in the buffers.
    pub(super) fn trace_done(&self, id: Option<u32>, job: &Job<'_>, r: &Result<JobResult>) {
        let Some(id) = id else { return };
        let mut guard = self.recording();
        let Some(rec) = guard.as_mut() else { return };
        let n = job.tasks.len();
        let done = match r {
            Ok(j) => DoneRecord {
                ok: true,
                errno: 0,
                task_counter: j.task_counter,
                elapsed_ns: j.hw_elapsed.map_or(0, |d| d.as_nanos() as u64),
                statuses: j.int_status.clone(),
            },
            Err(e) => {
                let mut statuses = vec![0; n];
                let (errno, task_counter) = match e {
                    Error::Timeout {
                        task_counter,
                        int_status,
                    } => {
                        if let Some(last) = statuses.last_mut() {
                            *last = *int_status;
                        }
                        (Errno::ETIMEDOUT as i32, *task_counter)
                    }
                    Error::Ioctl { errno, .. } => (errno.code(), 0),
                    _ => (-1, 0),
                };
                DoneRecord {
                    ok: false,
                    errno,
                    task_counter,
                    elapsed_ns: 0,
                    statuses,
                }
            }
        };
        let writes: Vec<u32> = job.writes.iter().map(|b| b.handle()).collect();
        rec.done(id, &done, &writes, &mut |h| self.trace_contents(h, true));
    }
}

/// The file the `n`-th device of this process records to under `RKNPU_TRACE`.
pub(super) fn trace_path(base: &std::path::Path) -> std::path::PathBuf {
    static OPENED: AtomicUsize = AtomicUsize::new(0);
    match OPENED.fetch_add(1, Ordering::SeqCst) {
        0 => base.to_path_buf(),
        n => {
            let mut s = base.as_os_str().to_owned();
            s.push(format!(".{n}"));
            s.into()
        }
    }
}
