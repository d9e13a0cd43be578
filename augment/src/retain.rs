//! Reusable buffers that follow the size of recent work, so that one outlier (a
//! 100-megapixel photo among 0.5-megapixel ones) does not pin its memory for the rest
//! of a run, while steady work still allocates nothing.
//!
//! A [`Retention`] notes how many bytes each sample needed. Every [`WINDOW`] samples it
//! takes the largest need of that window as what to keep; a buffer whose capacity is
//! more than twice what is kept (and over [`FLOOR`]) is shrunk to it. An outlier that
//! the last full window did not need is released right after its sample (during the
//! first window, when nothing is known yet, within two windows), and a data set of
//! uniformly large images keeps its buffers, since every window needs them. Releasing
//! at once matters with several workers: a worker that kept a large image's buffers
//! for a window would often still hold them when another worker decodes the next
//! large image, and the peak would be the sum (the soak benchmark showed it).

/// Samples per window.
pub const WINDOW: usize = 64;
/// Buffers this small are never worth shrinking.
pub const FLOOR: usize = 1 << 20;

/// Tracks recent needs and shrinks buffers that hold far more.
#[derive(Clone, Debug)]
pub struct Retention {
    seen: usize,
    window_max: usize,
    keep: usize,
}

impl Default for Retention {
    fn default() -> Self {
        // Until a window has been seen, keep everything.
        Retention {
            seen: 0,
            window_max: 0,
            keep: usize::MAX,
        }
    }
}

impl Retention {
    /// Record that one sample needed `bytes` of a buffer.
    pub fn note(&mut self, bytes: usize) {
        self.window_max = self.window_max.max(bytes);
        self.seen += 1;
        if self.seen == WINDOW {
            self.keep = self.window_max;
            self.seen = 0;
            self.window_max = 0;
        }
    }

    /// The bytes a buffer may keep: the last full window's need (everything until a
    /// window has been seen).
    pub fn keep(&self) -> usize {
        self.keep
    }

    /// Whether a buffer of `capacity` holds far more than recent work needs.
    pub fn too_big(&self, capacity: usize) -> bool {
        let keep = self.keep();
        capacity > FLOOR && keep != usize::MAX && capacity / 2 > keep
    }

    /// Shrink `buf` to what recent work needs when it holds far more.
    pub fn trim(&self, buf: &mut Vec<u8>) {
        if self.too_big(buf.capacity()) {
            buf.clear();
            buf.shrink_to(self.keep());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_outlier_is_released_right_after_its_sample() {
        let mut r = Retention::default();
        let mut buf: Vec<u8> = Vec::new();
        for i in 0..3 * WINDOW {
            let need = if i == 2 * WINDOW + 5 {
                200 << 20
            } else {
                2 << 20
            };
            buf.resize(need, 0);
            r.note(need);
            r.trim(&mut buf);
            if i == 2 * WINDOW + 5 {
                assert!(buf.capacity() < 8 << 20, "kept {}", buf.capacity());
            }
        }
    }

    #[test]
    fn an_outlier_in_the_first_window_is_released_within_two_windows() {
        let mut r = Retention::default();
        let mut buf: Vec<u8> = Vec::new();
        let mut held = Vec::new();
        for i in 0..4 * WINDOW {
            let need = if i == 3 { 200 << 20 } else { 2 << 20 };
            buf.resize(need, 0);
            r.note(need);
            r.trim(&mut buf);
            held.push(buf.capacity());
        }
        assert!(held[3] >= 200 << 20, "the outlier itself is decoded");
        assert!(
            held[2 * WINDOW..].iter().all(|&c| c < 8 << 20),
            "released after two windows: {:?}",
            &held[2 * WINDOW..2 * WINDOW + 4]
        );
    }

    #[test]
    fn steady_large_work_keeps_its_buffer() {
        let mut r = Retention::default();
        let mut buf: Vec<u8> = Vec::new();
        let mut reallocs = 0;
        for _ in 0..5 * WINDOW {
            let before = buf.capacity();
            buf.resize(50 << 20, 0);
            if buf.capacity() != before {
                reallocs += 1;
            }
            r.note(50 << 20);
            r.trim(&mut buf);
        }
        assert_eq!(reallocs, 1, "allocated once, then reused");
    }

    #[test]
    fn small_buffers_are_left_alone() {
        let mut r = Retention::default();
        for _ in 0..WINDOW {
            r.note(10);
        }
        let mut buf = vec![0u8; FLOOR];
        r.trim(&mut buf);
        assert_eq!(buf.capacity(), FLOOR);
    }
}
