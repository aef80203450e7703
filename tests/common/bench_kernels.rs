//! `kiln bench --kernels` run on a model and its table checked: every case, the calls the
//! layers and repetitions make, positive times, GB/s that are the bytes over the time, and a
//! profile whose kernels add up to its total.

/// Run `kiln bench --kernels -r 2` on `model` with `args`, and check its table for a model of
/// `layers` layers; the kernel names the profile listed, by case.
pub fn check(model: &std::path::Path, args: &[&str], layers: u64) -> Vec<(String, String)> {
    let out = super::kiln()
        .args(["bench", "--kernels", "-r", "2", "-m"])
        .arg(model)
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| case") && !l.starts_with("| ---"))
        .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
        .collect();
    let cases: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    let want = [
        "attn_qkv",
        "attn_output",
        "ffn_gate_up",
        "ffn_down",
        "output",
    ];
    assert_eq!(cases, want, "{text}");
    let mut kernels = Vec::new();
    for r in &rows {
        let num = |i: usize| r[i].parse::<f64>().unwrap_or_else(|_| panic!("{r:?}"));
        let calls = if r[0] == "output" { 2 } else { 2 * layers };
        assert_eq!(num(3) as u64, calls, "{r:?}");
        let (mib, us, gbps) = (num(2), num(4), num(5));
        assert!(mib > 0.0 && us > 0.0, "{r:?}");
        // GB/s: the bytes over the time, to the table's rounding.
        let expect = mib * (1u64 << 20) as f64 / (us * 1e3);
        assert!(
            (gbps - expect).abs() <= 0.05 + 0.06 * expect,
            "{r:?}: {expect}"
        );
        // The profile's kernels ("name ×calls µs", µs a call) add up to its total.
        let listed: f64 = r[8]
            .split(", ")
            .map(|k| k.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum();
        let total = num(6);
        assert!(
            (listed - total).abs() <= 0.01 * r[8].split(", ").count() as f64,
            "{r:?}"
        );
        kernels.push((r[0].to_string(), r[8].to_string()));
    }
    kernels
}
