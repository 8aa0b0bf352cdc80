//! Catching panics of recovery as oracle violations.
//!
//! A process-wide panic hook is installed once. On a thread inside
//! [`catch`] it records the panic message (with its location) instead of
//! printing it; on every other thread it defers to the previous hook, so
//! panics of engine background threads still reach stderr.

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    static CAPTURED: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

static INSTALL: Once = Once::new();

fn install() {
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let captured = CAPTURED
                .try_with(|slot| match slot.try_borrow_mut() {
                    Ok(mut slot) => match slot.as_mut() {
                        Some(list) => {
                            list.push(info.to_string());
                            true
                        }
                        None => false,
                    },
                    Err(_) => false,
                })
                .unwrap_or(false);
            if !captured {
                previous(info);
            }
        }));
    });
}

/// Runs `f`; a panic becomes `Err(message)` (the hook's message with its
/// location, or the payload).
pub(crate) fn catch<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    install();
    let outer = CAPTURED.with(|slot| slot.borrow_mut().replace(Vec::new()));
    let result = catch_unwind(AssertUnwindSafe(f));
    let messages = CAPTURED.with(|slot| std::mem::replace(&mut *slot.borrow_mut(), outer)).unwrap_or_default();
    result.map_err(|payload| {
        let payload = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|text| text.to_string()))
            .unwrap_or_else(|| "non-string panic payload".to_string());
        match messages.first() {
            Some(first) if messages.len() > 1 => format!("{first} (then: {})", messages[1..].join("; ")),
            Some(first) => first.clone(),
            None => payload,
        }
    })
}
