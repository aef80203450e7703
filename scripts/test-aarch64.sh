#!/usr/bin/env bash
# CI's aarch64 step: cross-build kiln for 64-bit ARM and run, under qemu's user-mode emulator, the
# CPU kernel tests (NEON and NEON+dotprod against the portable kernels, every block type) on an
# emulated CPU with dotprod (`max`) and one without (`cortex-a72`, where plain NEON must be what is
# picked), then one real-model golden test and the mixed-type model's on the dotprod CPU. Installs the cross toolchain, qemu and the Rust target
# when they are missing (Debian's gcc-aarch64-linux-gnu and qemu-user). Linker and runner:
# .cargo/config.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
target=aarch64-unknown-linux-gnu

if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq gcc-aarch64-linux-gnu qemu-user
fi
rustup target list --installed | grep -qx "$target" || rustup target add "$target"
scripts/fetch-models.sh
# CI installs the tools beside its first build (.ci/run), and runs the rest later.
if [ "${1:-}" = "--install-only" ]; then
  exit 0
fi

# The CPU side alone: the GPU backend (wgpu, a third of the dependencies' build) and the command
# line that offers it are not what this step tests.
features=(--no-default-features)
# neon.rs compiles only for this target, so it is linted here: clippy-driver compiles kiln's own
# crates in the test build with warnings denied (the library as `cargo clippy --lib` sees it is
# the golden test's dependency), one compilation instead of a check and a build.
clippy_driver="$(command -v clippy-driver)" # (fails here if clippy is missing)
export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-D warnings"
cargo test --release --target "$target" "${features[@]}" --lib --test golden --no-run

for cpu in max cortex-a72; do
  case "$cpu" in
    max) kernels="NEON+dotprod" ;;
    *) kernels="NEON" ;;
  esac
  echo "== qemu-aarch64 -cpu $cpu ($kernels)"
  QEMU_CPU="$cpu" KILN_EXPECT_KERNELS="$kernels" \
    cargo test --release --target "$target" "${features[@]}" --lib -- backend::cpu
done
# A whole forward pass on the dotprod kernels (the ones a current ARM machine takes); the plain NEON
# kernels meet the same portable ones in the unit tests above.
QEMU_CPU=max \
  cargo test --release --target "$target" "${features[@]}" --test golden -- --exact golden_real::gemma3_first_prompt_teacher_forced \
  golden_quants::every_quant_type_matches_llama_cpp
