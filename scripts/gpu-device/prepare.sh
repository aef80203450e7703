#!/usr/bin/env bash
# Prepares a measurement on a lent GPU (the device tool): everything the device machine cannot fetch goes into
# .dev/ and .gl/ (both in .git/info/exclude), which a device call carries:
#   - llama.cpp's llama-bench and llama-quantize built with Vulkan (GGML_NATIVE off), from the llama.cpp tree
#     the golden README builds (LLAMA_CPP, default /work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp);
#     Debian 12's Vulkan headers predate VK_EXT_layer_settings, which only the validation layers use, so the
#     build drops that block from ggml-vulkan.cpp (a copy of the file is kept beside it);
#   - kiln's release binary (and, with BASE=<commit>, that commit's, as kiln-base) and the GPU test binary;
#   - the Vulkan loader's Debian packages, gguf-py's wheel, a script that writes the 1B Llama shape
#     (../shared/tools/make-bench-models.py without its Qwen model) and make-8b.py (the 8B shape).
# Then, with tests/fixtures/models moved out of the tree for the call (the tree that travels must stay under
# 64 MiB), run `bash scripts/gpu-device/run.sh` (the measurement against llama.cpp) or `sweep.sh` (kernel shapes)
# on the device with carry [".dev", ".gl"]. On the 2-core VM the Vulkan build of llama.cpp takes about 13
# minutes the first time, the rest about 4.
set -euo pipefail
cd "$(dirname "$0")/../.."
LLAMA_CPP=${LLAMA_CPP:-/work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp}
grep -qx '/.dev/' .git/info/exclude 2>/dev/null || echo /.dev/ >> .git/info/exclude
grep -qx '/.gl/' .git/info/exclude 2>/dev/null || echo /.gl/ >> .git/info/exclude
mkdir -p .dev .gl

if [ ! -x "$LLAMA_CPP/build-vk/bin/llama-bench" ]; then
    command -v glslc >/dev/null || apt-get install -y glslc libvulkan-dev spirv-headers
    f="$LLAMA_CPP/ggml/src/ggml-vulkan/ggml-vulkan.cpp"
    [ -f "$f.orig" ] || cp "$f" "$f.orig"
    python3 - "$f" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
a = s.find('    VkBool32 enable_best_practice = layer_settings;')
end = 'vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions, &layer_setting_info);'
if a >= 0:
    b = s.index(end) + len(end)
    s = s[:a] + '    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions, nullptr);' + s[b:]
    open(p, 'w').write(s)
PY
    cmake -S "$LLAMA_CPP" -B "$LLAMA_CPP/build-vk" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_VULKAN=ON \
        -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF
    cmake --build "$LLAMA_CPP/build-vk" -j2 --target llama-bench llama-quantize
fi
(cd "$LLAMA_CPP/build-vk" && strip bin/*.so* 2>/dev/null; tar cJhf - bin/llama-bench bin/llama-quantize bin/lib*.so*) \
    > .dev/llama-vk.tar.xz

cargo build --release
strip -o .dev/kiln target/release/kiln && xz -f -T2 .dev/kiln
tests=$(cargo test --release --test gpu --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "gpu" and m.get("executable"): print(m["executable"])')
strip -o .dev/gpu-tests "$tests" && xz -f -T2 .dev/gpu-tests
if [ -n "${BASE:-}" ]; then
    rm -rf /tmp/kiln-base && git worktree add -f /tmp/kiln-base "$BASE"
    (cd /tmp/kiln-base && cargo build --release --target-dir /tmp/kiln-base-target)
    strip -o .dev/kiln-base /tmp/kiln-base-target/release/kiln && xz -f -T2 .dev/kiln-base
    git worktree remove --force /tmp/kiln-base
fi

o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
mkdir -p /tmp/amd64/partial
apt-get $o update >/dev/null
(cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null)
python3 -m pip download -q --no-deps gguf==0.19.0 -d .dev
cp tests/fixtures/models/llama3-vocab.gguf .dev/
python3 - <<'PY'
s = open('../shared/tools/make-bench-models.py').read()
a = s.index('model(f"{out}/qwen25-1.5b-shape.f16.gguf"')
b = s.index('model(f"{out}/llama32-1b-shape.f16.gguf"')
s = s[:a] + s[b:]
s = s.replace('os.path.join(HERE, "..", "models", "llama3-vocab.gguf")', 'os.path.join(HERE, "llama3-vocab.gguf")')
open('.dev/make-1b.py', 'w').write(s)
PY
cp scripts/gpu-device/make-8b.py tests/fixtures/tiny_gguf.py .dev/
du -sh .dev .gl
