//! The KV cache's memory by type: allocating a session's cache grows resident memory by what
//! `kv_bytes_per_token` says, for f32, f16 and q8_0 (34 bytes per 32 values: 53 % of f16). Its own
//! test binary, so nothing else allocates while it measures.

mod common;

#[cfg(target_os = "linux")]
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

#[cfg(target_os = "linux")]
#[test]
fn each_cache_type_takes_the_memory_it_should() {
    use kiln::backend::CacheType;
    use kiln::model::arch::KvCacheTypes;
    use kiln::model::{ModelFile, Session};

    let mf = ModelFile::open(&common::real_model(common::REAL_MODELS[0])).unwrap();
    let model = common::golden_run::load(&mf, 1);
    let ctx = 2048;
    let mut sizes = Vec::new();
    // All kept alive, so no allocation reuses memory another freed.
    let mut sessions = Vec::new();
    for ty in CacheType::ALL {
        let types = KvCacheTypes { k: ty, v: ty };
        let before = rss_bytes();
        // Batch 1: the scratch buffers are a few hundred KiB beside the cache.
        sessions.push(Session::with_options(&model, ctx, 1, types).unwrap());
        let grown = rss_bytes() - before;
        let expected = (model.kv_bytes_per_token(types) * ctx) as u64;
        eprintln!(
            "{ty}: {} bytes per token, {} MiB for {ctx} tokens; resident memory grew {} MiB",
            model.kv_bytes_per_token(types),
            expected >> 20,
            grown >> 20
        );
        assert!(
            grown >= expected * 95 / 100 && grown <= expected + (2 << 20),
            "{ty}: grew {grown} bytes for a cache of {expected}"
        );
        sizes.push(expected);
    }
    let [f32, f16, q8_0] = sizes[..] else {
        unreachable!()
    };
    assert_eq!(f32, 2 * f16);
    assert_eq!(q8_0 * 64, f16 * 34, "q8_0: 34 bytes per 32 values, f16 64");
}
