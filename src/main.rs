//! The `kiln` binary: parse the command line and dispatch; everything else lives in the library.

use std::process::ExitCode;

fn main() -> ExitCode {
    quiet_vulkan_device_select();
    let cli = kiln::cli::parse_args(std::env::args_os());
    match kiln::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", kiln::cli::error_message(&e));
            kiln::cli::exit_code_for(&e)
        }
    }
}

/// Mesa's Vulkan device-selection layer asks the Wayland compositor which GPU is the default, and
/// where there is no session (`XDG_RUNTIME_DIR` unset: a server, a container, a cron job)
/// libwayland prints "error: XDG_RUNTIME_DIR is invalid or not set in the environment" to
/// stderr on every run that looks for a GPU. kiln orders the adapters itself, so the layer is
/// switched off by its own variable there, unless the user is steering it.
fn quiet_vulkan_device_select() {
    #[cfg(target_os = "linux")]
    {
        let var = |name| std::env::var_os(name);
        let session =
            var("XDG_RUNTIME_DIR").is_some_and(|d| d.as_encoded_bytes().starts_with(b"/"));
        if !session && var("NODEVICE_SELECT").is_none() && var("MESA_VK_DEVICE_SELECT").is_none() {
            // SAFETY: first thing in `main`: no other thread exists yet to read the environment.
            unsafe { std::env::set_var("NODEVICE_SELECT", "1") };
        }
    }
}
