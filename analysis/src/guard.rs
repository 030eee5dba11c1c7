//! Panics inside the decoding library, caught and made the failure of the file being decoded.
//!
//! Symphonia asserts on some header values it does not check first (a WAV whose `fmt` chunk
//! says 0 Hz panics in `TimeBase::new` while being probed), and a crafted file may reach other
//! such asserts. Every call into it (the probe, the decoder's construction, each packet read
//! and decoded) runs under [`catch`]: a panic becomes [`crate::Error::DecoderPanic`] for that
//! file, the reader and decoder it left behind are never called again, and the other files of
//! the call go on. Panics in the analyser's own code are not caught: they are bugs.
//!
//! A process's panic hook runs before the unwinding reaches [`catch`]. [`catching`] tells it
//! that this panic will be caught and reported as a file's failure, so that a hook which
//! reports panics as bugs can stay quiet. The flag is per thread: another thread's panic at the
//! same moment is still a bug.

use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    /// Calls under [`catch`] on this thread (nested calls count).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Whether a panic on the current thread, now, would be caught by the analyser and become the
/// failure of the file being decoded (see the module's documentation). For a panic hook:
/// `if analysis::catching_decoder_panic() { /* log quietly */ return; }`.
pub fn catching() -> bool {
    DEPTH.with(Cell::get) > 0
}

/// Runs `f`, a call into the decoding library; a panic in it is returned as its message.
///
/// `AssertUnwindSafe`: what `f` touches (the format reader, the decoder) is discarded after a
/// panic, never used in the state the panic left it in.
pub(crate) fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    DEPTH.with(|d| d.set(d.get() + 1));
    let outcome = catch_unwind(AssertUnwindSafe(f));
    DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    outcome.map_err(|payload| message(payload.as_ref()))
}

/// A panic's message (`panic!` gives a `&str` or a `String`).
fn message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic)]
    use super::*;

    #[test]
    fn a_panic_is_its_message_and_the_flag_is_set_only_inside() {
        assert!(!catching());
        let seen = catch(catching).ok();
        assert_eq!(seen, Some(true));
        assert!(!catching());
        let caught = catch(|| -> u32 { panic!("TimeBase cannot have 0 numerator") });
        assert_eq!(caught, Err("TimeBase cannot have 0 numerator".to_owned()));
        let formatted = catch(|| -> u32 { panic!("rate {}", 0) });
        assert_eq!(formatted, Err("rate 0".to_owned()));
        assert!(!catching(), "restored after a panic");
        assert_eq!(catch(|| catch(|| 7)), Ok(Ok(7)));
    }
}
