//! The chunked attention against the per-row path, on every level, cache type and shape.
use super::super::kernels::tests::every_level;
use super::super::portable::tests::activations;
use super::*;
use crate::backend::{CacheType, CoreOps};

/// A cache of `ty` holding `n` rows of `width` pseudo-random values.
fn filled(b: &CpuBackend, ty: CacheType, n: usize, width: usize, seed: u64) -> CpuCache {
    let mut c = b.cache(n * width, ty, 1).unwrap();
    let src = activations(n * width, seed);
    b.store_rows(&src, &mut c, 0, n, width);
    c
}

/// The chunked attention agrees with the one-row-at-a-time path on every head size, cache
/// type, window and split, at every level this CPU runs, and a row gets the same bits in
/// prefill and in generation.
#[test]
fn chunked_attention_matches_the_per_row_path() {
    for kernels in every_level() {
        let mut b = CpuBackend::new(2).unwrap();
        let level = kernels.name();
        b.kernels = kernels;
        check_chunked_attention(&b, level);
    }
}

fn check_chunked_attention(b: &CpuBackend, isa: &str) {
    // (head_dim, heads, kv heads, window, soft cap of the scores, sinks)
    let shapes = [
        (64, 8, 2, None, None, false),
        (128, 6, 2, Some(70), None, false),
        (256, 4, 1, None, None, false),
        (48, 3, 3, Some(200), None, true),
        (64, 4, 2, Some(50), Some(0.5), false),
        (64, 8, 2, None, None, true),
        // Generation takes a task per KV head rather than per chunk here (4 heads, 2 threads).
        (128, 8, 4, None, None, false),
        // Heads of other whole vectors: the vision towers' 72, Phi-3's 96, and an odd count.
        (72, 4, 4, None, None, false),
        (96, 6, 2, Some(40), None, false),
        (80, 2, 1, None, None, false),
        (8, 2, 1, None, None, false),
        (16, 4, 2, Some(9), None, false),
    ];
    for (hd, nh, nkv, window, softcap, with_sinks) in shapes {
        // Sinks around the scores' scale, some above every score.
        let sink_values: Vec<f32> = activations(nh, 9).iter().map(|s| 4.0 * s).collect();
        let sinks = with_sinks.then_some(&sink_values[..]);
        // (q8_0 takes the per-row path itself, and only for heads of whole blocks)
        for ty in CacheType::ALL
            .into_iter()
            .filter(|ty| hd % ty.block_len() == 0)
        {
            let (start, rows) = (300, 37);
            let n = start + rows;
            let kv_width = nkv * hd;
            let k = filled(b, ty, n, kv_width, 1 + hd as u64);
            let v = filled(b, ty, n, kv_width, 2 + hd as u64);
            let q = activations(rows * nh * hd, 3);
            let p = AttentionParams {
                start_pos: start,
                rows,
                n_heads: nh,
                n_kv_heads: nkv,
                head_dim: hd,
                scale: 1.0 / (hd as f32).sqrt(),
                window,
                softcap,
                causal: true,
            };
            let mut want = vec![0f32; rows * nh * hd];
            let mut got = vec![0f32; rows * nh * hd];
            b.attention_rows(&q, &k, &v, &mut want, &p, sinks);
            b.attention_impl(&q, &k, &v, &mut got, &p, sinks);
            let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));

            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                // f16 caches: both paths round the normalized softmax weights to f16, and float
                // order puts a few on the other side of a rounding boundary (up to 4.3e-5 of
                // the scale here; rounding each chunk's own exponentials, as kiln once did,
                // gave 2.4e-4 to 2.8e-4 on every shape).
                let tol = if ty == CacheType::F16 { 1e-4 } else { 1e-5 };
                assert!(
                    (g - w).abs() <= tol * scale,
                    "{isa}: hd {hd} {ty:?} value {i}: {g} vs {w}"
                );
            }
            // The last row alone (generation: split over chunks) equals its prefill row.
            let last = rows - 1;
            let one = AttentionParams {
                start_pos: start + last,
                rows: 1,
                ..p
            };
            let mut alone = vec![0f32; nh * hd];
            b.attention_impl(&q[last * nh * hd..], &k, &v, &mut alone, &one, sinks);
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&alone),
                bits(&got[last * nh * hd..]),
                "{isa}: hd {hd} {ty:?}: generation and prefill differ"
            );
        }
    }
}

/// A row of a non-causal call sees every key of the call: its output is that of a one-row causal
/// call at the call's last position with the same query, bit for bit, on every cache type and on
/// both the chunked and the per-row paths.
#[test]
fn non_causal_rows_see_the_whole_call() {
    let b = CpuBackend::new(2).unwrap();
    let (hd, nh, nkv) = (64, 4, 2);
    for ty in CacheType::ALL {
        let (start, rows) = (40, 19);
        let n = start + rows;
        let kv_width = nkv * hd;
        let k = filled(&b, ty, n, kv_width, 11);
        let v = filled(&b, ty, n, kv_width, 12);
        let q = activations(rows * nh * hd, 13);
        let p = AttentionParams {
            start_pos: start,
            rows,
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            scale: 0.125,
            window: None,
            softcap: None,
            causal: false,
        };
        let mut got = vec![0f32; rows * nh * hd];
        b.attention(&q, &k, &v, &mut got, &p, None);
        let mut rowwise = vec![0f32; rows * nh * hd];
        b.attention_rows(&q, &k, &v, &mut rowwise, &p, None);
        let last = AttentionParams {
            start_pos: n - 1,
            rows: 1,
            causal: true,
            ..p
        };
        let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        for i in 0..rows {
            let row = i * nh * hd..(i + 1) * nh * hd;
            let mut want = vec![0f32; nh * hd];
            b.attention_rows(&q[row.clone()], &k, &v, &mut want, &last, None);
            assert_eq!(bits(&rowwise[row.clone()]), bits(&want), "{ty:?} row {i}");
            let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
            for (g, w) in got[row].iter().zip(&want) {
                assert!((g - w).abs() <= 1e-4 * scale, "{ty:?} row {i}: {g} vs {w}");
            }
        }
        // A causal call differs: its first row does not see the rows after it.
        let mut causal = vec![0f32; rows * nh * hd];
        b.attention(
            &q,
            &k,
            &v,
            &mut causal,
            &AttentionParams { causal: true, ..p },
            None,
        );
        assert_ne!(bits(&causal[..nh * hd]), bits(&got[..nh * hd]));
    }
}

/// Full attention of many rows from position 0 (the vision towers' calls) takes the wide path,
/// which agrees with the per-row path on every head size it takes (the vision towers' 72, a
/// grouped 64, the smallest 8), key counts that are and are not whole tiles, and every level.
#[test]
fn wide_attention_matches_the_per_row_path() {
    for kernels in every_level() {
        let mut b = CpuBackend::new(2).unwrap();
        let level = kernels.name();
        b.kernels = kernels;
        for (hd, nh, nkv, rows) in [
            (72, 3, 3, 83),
            (64, 8, 2, 64),
            (8, 2, 1, 130),
            (16, 2, 2, 300),
            (72, 2, 1, 75),
        ] {
            let kv_width = nkv * hd;
            let k = filled(&b, CacheType::F32, rows, kv_width, 21 + hd as u64);
            let v = filled(&b, CacheType::F32, rows, kv_width, 22 + hd as u64);
            let q = activations(rows * nh * hd, 23);
            let p = AttentionParams {
                start_pos: 0,
                rows,
                n_heads: nh,
                n_kv_heads: nkv,
                head_dim: hd,
                scale: 1.0 / (hd as f32).sqrt(),
                window: None,
                softcap: None,
                causal: false,
            };
            assert!(CpuBackend::takes_wide(&p, &k, &v, None));
            let mut want = vec![0f32; rows * nh * hd];
            let mut got = vec![0f32; rows * nh * hd];
            b.attention_rows(&q, &k, &v, &mut want, &p, None);
            b.attention(&q, &k, &v, &mut got, &p, None);
            let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-5 * scale,
                    "{level}: hd {hd}, {rows} rows, value {i}: {g} vs {w}"
                );
            }
        }
    }
}

/// The wide attention's AVX-512 tiles (wide/avx512.rs) take each sum in the AVX2 tiles' order
/// (one fused multiply-add per term, then the scale), and the AVX-512 `exp_sub` sums as AVX2's:
/// the two levels' outputs are the same bits. (A CPU without AVX-512 has one x86 level to run.)
#[cfg(target_arch = "x86_64")]
#[test]
fn wide_attention_is_the_same_bits_at_the_avx2_and_avx512_levels() {
    use super::super::kernels::Level;
    let find = |l: Level| every_level().into_iter().find(|k| k.level == l);
    let (Some(avx2), Some(avx512)) = (find(Level::Avx2), find(Level::Avx512Vnni)) else {
        eprintln!("this CPU runs no AVX-512 level: nothing to compare");
        return;
    };
    let run = |l: Level, hd: usize, nh: usize, rows: usize| {
        let mut b = CpuBackend::new(2).unwrap();
        b.kernels = find(l).expect("the level is there");
        let k = filled(&b, CacheType::F32, rows, nh * hd, 31 + hd as u64);
        let v = filled(&b, CacheType::F32, rows, nh * hd, 32 + hd as u64);
        let q = activations(rows * nh * hd, 33);
        let p = AttentionParams {
            start_pos: 0,
            rows,
            n_heads: nh,
            n_kv_heads: nh,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            window: None,
            softcap: None,
            causal: false,
        };
        let mut out = vec![0f32; rows * nh * hd];
        b.attention(&q, &k, &v, &mut out, &p, None);
        out
    };
    // Head sizes of 8, 16, 24, 40, 64, 72 and 80 values (every value-tile width), and key counts
    // that end in a 16-key panel.
    for (hd, rows) in [
        (72, 83),
        (8, 130),
        (16, 75),
        (24, 64),
        (40, 100),
        (64, 97),
        (80, 70),
    ] {
        let (a, b) = (
            run(Level::Avx2, hd, 2, rows),
            run(Level::Avx512Vnni, hd, 2, rows),
        );
        let same = a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same, "hd {hd}, {rows} rows: AVX2 and AVX-512 differ");
    }
    let xs: Vec<f32> = (0..4133).map(|i| (i as f32 - 2000.0) * 0.011).collect();
    let (mut a, mut b) = (xs.clone(), xs);
    let (sa, sb) = ((avx2.exp_sub)(&mut a, 3.0), (avx512.exp_sub)(&mut b, 3.0));
    assert_eq!(sa.to_bits(), sb.to_bits(), "exp_sub's sums");
}
