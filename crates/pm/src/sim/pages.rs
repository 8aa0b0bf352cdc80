//! The persisted image as a copy-on-write page table.
//!
//! Pages are 4 KiB `Arc`s grouped into directories of 64 pages, each itself an
//! `Arc`. Capturing a crash state clones only the directory `Arc`s; a later
//! write to the live persisted image copies one directory (64 pointers) and
//! one page if a captured state still shares them. All-zero pages of the
//! initial image share a single allocation.

use std::sync::Arc;

/// Bytes per page.
pub(crate) const PAGE_SIZE: usize = 4096;
/// Pages per directory.
const DIR_PAGES: usize = 64;

type Page = [u8; PAGE_SIZE];

/// A copy-on-write byte image of `len` bytes.
#[derive(Clone)]
pub(crate) struct Pages {
    len: u64,
    dirs: Vec<Arc<Vec<Arc<Page>>>>,
}

impl Pages {
    /// Builds an image of `len` bytes; `fill(offset, buffer)` supplies the
    /// bytes of each page (the last page may be short).
    pub(crate) fn build(len: u64, mut fill: impl FnMut(u64, &mut [u8])) -> Self {
        let zero: Arc<Page> = Arc::new([0; PAGE_SIZE]);
        let page_count = len.div_ceil(PAGE_SIZE as u64) as usize;
        let dir_count = page_count.div_ceil(DIR_PAGES);
        let mut buffer: Box<Page> = Box::new([0; PAGE_SIZE]);
        let mut dirs = Vec::with_capacity(dir_count);
        for dir_index in 0..dir_count {
            let first = dir_index * DIR_PAGES;
            let last = (first + DIR_PAGES).min(page_count);
            let mut dir = Vec::with_capacity(last - first);
            for page_index in first..last {
                let start = page_index as u64 * PAGE_SIZE as u64;
                let size = (len - start).min(PAGE_SIZE as u64) as usize;
                buffer.fill(0);
                fill(start, &mut buffer[..size]);
                if buffer.iter().all(|&byte| byte == 0) {
                    dir.push(Arc::clone(&zero));
                } else {
                    dir.push(Arc::new(*buffer));
                }
            }
            dirs.push(Arc::new(dir));
        }
        Self { len, dirs }
    }

    /// Image length in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    fn page(&self, page_index: usize) -> &Page {
        &self.dirs[page_index / DIR_PAGES][page_index % DIR_PAGES]
    }

    /// Copies bytes at `offset` (not crossing a page boundary) into `destination`.
    pub(crate) fn read_within_page(&self, offset: u64, destination: &mut [u8]) {
        let page_index = (offset / PAGE_SIZE as u64) as usize;
        let start = (offset % PAGE_SIZE as u64) as usize;
        destination.copy_from_slice(&self.page(page_index)[start..start + destination.len()]);
    }

    /// Writes `source` at `offset`, copying shared pages first.
    pub(crate) fn write(&mut self, offset: u64, source: &[u8]) {
        assert!(offset + source.len() as u64 <= self.len, "persisted image write out of range");
        let mut done = 0usize;
        while done < source.len() {
            let position = offset + done as u64;
            let page_index = (position / PAGE_SIZE as u64) as usize;
            let start = (position % PAGE_SIZE as u64) as usize;
            let step = (PAGE_SIZE - start).min(source.len() - done);
            let dir = Arc::make_mut(&mut self.dirs[page_index / DIR_PAGES]);
            let page = Arc::make_mut(&mut dir[page_index % DIR_PAGES]);
            page[start..start + step].copy_from_slice(&source[done..done + step]);
            done += step;
        }
    }

    /// The whole image as one buffer.
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.len as usize);
        for dir in &self.dirs {
            for page in dir.iter() {
                let remaining = self.len as usize - bytes.len();
                bytes.extend_from_slice(&page[..remaining.min(PAGE_SIZE)]);
            }
        }
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_on_write_keeps_clones_unchanged() {
        let len = 3 * PAGE_SIZE as u64 * DIR_PAGES as u64 + 100;
        let mut pages = Pages::build(len, |offset, buffer| {
            if offset == PAGE_SIZE as u64 {
                buffer[0] = 7;
            }
        });
        let before = pages.clone();
        pages.write(len - 10, &[1, 2, 3]);
        pages.write(PAGE_SIZE as u64 - 2, &[9, 9, 9, 9]);
        let after = pages.to_vec();
        let old = before.to_vec();
        assert_eq!(after.len() as u64, len);
        assert_eq!(old.len() as u64, len);
        assert_eq!(&after[len as usize - 10..len as usize - 7], &[1, 2, 3]);
        assert_eq!(&after[PAGE_SIZE - 2..PAGE_SIZE + 2], &[9, 9, 9, 9]);
        assert_eq!(old[PAGE_SIZE], 7);
        assert!(old[..PAGE_SIZE].iter().all(|&b| b == 0));
        assert!(old[len as usize - 10..].iter().all(|&b| b == 0));
        let mut word = [0u8; 2];
        pages.read_within_page(PAGE_SIZE as u64 - 2, &mut word);
        assert_eq!(word, [9, 9]);
    }
}
