//! The repacked weights' memory (`repack.rs`).

/// A zeroed, page-aligned byte buffer: an anonymous mapping of its own, in transparent huge pages
/// where the system allows them: generation streams the whole model per token, and with 4 KiB
/// pages every page is a TLB miss and a restart of the hardware prefetcher. The cost is at load,
/// rarely more than a fraction of a second: when the kernel has to compact memory for free huge
/// pages.
pub(super) struct AlignedBytes {
    map: memmap2::MmapMut,
    pub(super) len: usize,
}

impl AlignedBytes {
    /// None when the allocation fails.
    pub(super) fn zeroed(len: usize) -> Option<AlignedBytes> {
        let map = memmap2::MmapMut::map_anon(len.max(1)).ok()?;
        // Advice only: where huge pages are off or unsupported the buffer works as it is.
        #[cfg(target_os = "linux")]
        let _ = map.advise(memmap2::Advice::HugePage);
        Some(AlignedBytes { map, len })
    }

    pub(super) fn as_slice(&self) -> &[u8] {
        &self.map[..self.len]
    }

    pub(super) fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.map[..self.len]
    }
}
