//! Images in: decoding (PNG, JPEG, WebP, BMP, GIF's first frame, through the `image` crate, with
//! the EXIF orientation applied), and the preprocessing a projector asks for, as llama.cpp's
//! `mtmd-image.cpp` does it: the aspect-preserving "smart resize" to whole tokens, Pillow's
//! fixed-point bicubic resampling (so kiln's pixels are llama.cpp's, bit for bit), letterboxing,
//! and the per-channel normalization.
//!
//! Images are untrusted: the decoder is given limits, so a header that claims 100000 × 100000
//! pixels is an error before anything of that size is allocated.

use std::io::Cursor;
use std::path::Path;

use image::{DynamicImage, ImageDecoder, ImageReader, Limits};

use crate::error::{Error, Result};

/// The largest side kiln decodes, the most pixels (64 megapixels: a 48-megapixel photograph is
/// 8064 × 6048), and the most memory the decoder may allocate. A few hundred bytes of JPEG can
/// claim 16384 × 16383 pixels and decode them from what little it holds: the pixel bound stops
/// that before 800 MB of pixels are made.
const MAX_SIDE: u32 = 16384;
const MAX_PIXELS: u64 = 64 << 20;
const MAX_DECODE_BYTES: u64 = 1 << 30;

/// 8-bit RGB pixels, row-major, 3 bytes per pixel.
#[derive(Clone, PartialEq, Eq)]
pub struct RgbImage {
    pub width: usize,
    pub height: usize,
    pub pixels: Vec<u8>,
}

impl std::fmt::Debug for RgbImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RgbImage {}×{}", self.width, self.height)
    }
}

impl RgbImage {
    /// A black image.
    pub fn black(width: usize, height: usize) -> RgbImage {
        RgbImage {
            width,
            height,
            pixels: vec![0; width * height * 3],
        }
    }
}

/// Read and decode the image file at `path`.
pub fn load(path: &Path) -> Result<RgbImage> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    decode(&bytes).map_err(|e| e.in_file(path))
}

/// Decode an image held in memory (a file's bytes, or a data URL's payload).
pub fn decode(bytes: &[u8]) -> Result<RgbImage> {
    let reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| Error::Format(format!("cannot read the image: {e}")))?;
    if reader.format().is_none() {
        return Err(Error::Format(
            "not an image kiln can read (PNG, JPEG, WebP, BMP or GIF)".into(),
        ));
    }
    let mut reader = reader;
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    limits.max_alloc = Some(MAX_DECODE_BYTES);
    reader.limits(limits);
    let bad = |e: image::ImageError| match e {
        image::ImageError::Limits(_) => Error::Format(format!(
            "the image is too large: kiln decodes up to {MAX_SIDE} × {MAX_SIDE} pixels"
        )),
        other => Error::Format(format!("cannot decode the image: {other}")),
    };
    let mut decoder = reader.into_decoder().map_err(bad)?;
    let (w, h) = decoder.dimensions();
    if w == 0 || h == 0 {
        return Err(Error::Format(format!(
            "the image has no pixels ({w} × {h})"
        )));
    }
    if w > MAX_SIDE || h > MAX_SIDE || w as u64 * h as u64 > MAX_PIXELS {
        return Err(Error::Format(format!(
            "the image is too large: {w} × {h} pixels; kiln decodes up to {MAX_SIDE} pixels a \
             side and {} megapixels",
            MAX_PIXELS >> 20
        )));
    }
    let orientation = decoder.orientation().map_err(bad)?;
    let mut img = DynamicImage::from_decoder(decoder).map_err(bad)?;
    img.apply_orientation(orientation);
    let rgb = img.to_rgb8();
    Ok(RgbImage {
        width: rgb.width() as usize,
        height: rgb.height() as usize,
        pixels: rgb.into_raw(),
    })
}

/// llama.cpp's `calc_size_preserved_ratio` (Qwen's "smart resize"): the size nearest the image's
/// in whole multiples of `align`, scaled down to at most `max_pixels` or up to at least
/// `min_pixels`, the aspect ratio kept. f32 arithmetic as llama.cpp's, so the sizes agree.
pub fn smart_size(
    width: usize,
    height: usize,
    align: usize,
    min_pixels: usize,
    max_pixels: usize,
) -> (usize, usize) {
    let f = align as f32;
    let round_by = |x: f32| (x / f).round() as usize * align;
    let ceil_by = |x: f32| (x / f).ceil() as usize * align;
    let floor_by = |x: f32| (x / f).floor() as usize * align;
    let (w, h) = (width as f32, height as f32);
    let mut w_bar = align.max(round_by(w));
    let mut h_bar = align.max(round_by(h));
    if h_bar * w_bar > max_pixels {
        let beta = (h * width as f32 / max_pixels as f32).sqrt();
        h_bar = align.max(floor_by(h / beta));
        w_bar = align.max(floor_by(w / beta));
    } else if h_bar * w_bar < min_pixels {
        let beta = (min_pixels as f32 / (h * w)).sqrt();
        h_bar = ceil_by(h * beta);
        w_bar = ceil_by(w * beta);
    }
    (w_bar, h_bar)
}

/// The resampling filter of a projector's resize (llama.cpp's `resize_algo`), as Pillow's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    /// The triangle filter (Gemma 3).
    Bilinear,
    /// Pillow's bicubic, a = −0.5 (Qwen).
    Bicubic,
}

impl Filter {
    /// The filter's radius in input pixels (before widening for a downscale).
    fn support(self) -> f64 {
        match self {
            Filter::Bilinear => 1.0,
            Filter::Bicubic => 2.0,
        }
    }

    /// The filter's weight at distance `x` from the output pixel's center.
    fn weight(self, x: f64) -> f64 {
        let x = x.abs();
        match self {
            Filter::Bilinear => (1.0 - x).max(0.0),
            Filter::Bicubic => {
                const A: f64 = -0.5;
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
        }
    }
}

/// Resize to `width × height` keeping the aspect ratio, centered on black (llama.cpp's
/// `img_tool::resize` with `PAD_CEIL`); a copy when the size is already right.
pub fn resize_letterboxed(img: &RgbImage, width: usize, height: usize, filter: Filter) -> RgbImage {
    if (img.width, img.height) == (width, height) {
        return img.clone();
    }
    let scale = (width as f32 / img.width as f32).min(height as f32 / img.height as f32);
    let new_w = ((img.width as f32 * scale).ceil() as usize).min(width);
    let new_h = ((img.height as f32 * scale).ceil() as usize).min(height);
    let resized = resize(img, new_w.max(1), new_h.max(1), filter);
    let mut out = RgbImage::black(width, height);
    let (ox, oy) = ((width - resized.width) / 2, (height - resized.height) / 2);
    for y in 0..resized.height {
        let src = &resized.pixels[y * resized.width * 3..(y + 1) * resized.width * 3];
        let at = ((y + oy) * width + ox) * 3;
        out.pixels[at..at + src.len()].copy_from_slice(src);
    }
    out
}

/// Pillow's separable resampling in its fixed-point form (22 fractional bits), as llama.cpp's
/// `resize_pillow` adapted it: horizontal pass, then vertical, each rounded to 8 bits.
pub fn resize(img: &RgbImage, width: usize, height: usize, filter: Filter) -> RgbImage {
    let mut cur = img.clone();
    if width != cur.width {
        let (bounds, weights, k) = coefficients(cur.width, width, filter);
        let mut out = RgbImage::black(width, cur.height);
        for y in 0..cur.height {
            let row = &cur.pixels[y * cur.width * 3..];
            for x in 0..width {
                let (start, count) = bounds[x];
                let w = &weights[x * k..x * k + count];
                for c in 0..3 {
                    let mut acc: i32 = 1 << (PRECISION_BITS - 1);
                    for (i, &wi) in w.iter().enumerate() {
                        acc += row[(start + i) * 3 + c] as i32 * wi;
                    }
                    out.pixels[(y * width + x) * 3 + c] = clip8(acc);
                }
            }
        }
        cur = out;
    }
    if height != cur.height {
        let (bounds, weights, k) = coefficients(cur.height, height, filter);
        let row_len = cur.width * 3;
        let mut out = RgbImage::black(cur.width, height);
        let mut acc = vec![0i32; row_len];
        for y in 0..height {
            let (start, count) = bounds[y];
            acc.fill(1 << (PRECISION_BITS - 1));
            for (i, &wi) in weights[y * k..y * k + count].iter().enumerate() {
                let src = &cur.pixels[(start + i) * row_len..(start + i + 1) * row_len];
                for (a, &p) in acc.iter_mut().zip(src) {
                    *a += p as i32 * wi;
                }
            }
            for (o, &a) in out.pixels[y * row_len..(y + 1) * row_len]
                .iter_mut()
                .zip(&acc)
            {
                *o = clip8(a);
            }
        }
        cur = out;
    }
    cur
}

const PRECISION_BITS: u32 = 32 - 8 - 2;

fn clip8(acc: i32) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Per output pixel its first input pixel and count, the fixed-point weights (`k` per output
/// pixel), and `k`: Pillow's `precompute_coeffs`.
fn coefficients(
    in_size: usize,
    out_size: usize,
    filter: Filter,
) -> (Vec<(usize, usize)>, Vec<i32>, usize) {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = filter.support() * filterscale;
    let k = support.ceil() as usize * 2 + 1;
    let mut bounds = Vec::with_capacity(out_size);
    let mut weights = vec![0i32; out_size * k];
    let fixed = (1u64 << PRECISION_BITS) as f64;
    let mut pre = vec![0f64; k];
    for xx in 0..out_size {
        let center = (xx as f64 + 0.5) * scale;
        // Truncation toward zero, as C's cast; negatives clamp to 0 either way.
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
        let count = xmax.saturating_sub(xmin).min(k);
        let mut total = 0.0;
        for (x, p) in pre.iter_mut().enumerate().take(count) {
            let w = filter.weight((x as f64 + xmin as f64 - center + 0.5) / filterscale);
            *p = w;
            total += w;
        }
        for (x, p) in pre.iter().enumerate().take(count) {
            let w = if total != 0.0 { p / total } else { *p };
            let rounded = w * fixed + if w < 0.0 { -0.5 } else { 0.5 };
            weights[xx * k + x] = rounded as i32;
        }
        bounds.push((xmin, count));
    }
    (bounds, weights, k)
}

/// The image as f32 planes-interleaved values (row-major, 3 per pixel): v/255, then
/// (v − mean) / std per channel, in f32 as llama.cpp's `from_u8` and `normalize`.
pub fn normalize(img: &RgbImage, mean: [f32; 3], std: [f32; 3]) -> Vec<f32> {
    img.pixels
        .iter()
        .enumerate()
        .map(|(i, &p)| (p as f32 / 255.0 - mean[i % 3]) / std[i % 3])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smart_size_matches_llama_cpp_examples() {
        // Already whole tokens: unchanged.
        assert_eq!(smart_size(32, 32, 8, 512, 262144), (32, 32));
        // Rounded to the nearest multiple.
        assert_eq!(smart_size(45, 29, 8, 512, 262144), (48, 32));
        // Too small: scaled up to at least the minimum.
        let (w, h) = smart_size(10, 10, 8, 512, 262144);
        assert!(w * h >= 512 && w == h, "{w}×{h}");
        // Too large: scaled down under the maximum.
        let (w, h) = smart_size(4000, 3000, 32, 8 * 1024, 4096 * 1024);
        assert!(
            w * h <= 4096 * 1024 && w % 32 == 0 && h % 32 == 0,
            "{w}×{h}"
        );
    }

    #[test]
    fn resizing_to_the_same_size_or_a_flat_image_changes_nothing() {
        let img = RgbImage {
            width: 7,
            height: 5,
            pixels: (0..105).map(|i| (i * 37 % 251) as u8).collect(),
        };
        for filter in [Filter::Bilinear, Filter::Bicubic] {
            assert_eq!(resize(&img, 7, 5, filter), img);
        }
        let flat = RgbImage {
            width: 9,
            height: 4,
            pixels: vec![200; 108],
        };
        let up = resize(&flat, 17, 11, Filter::Bicubic);
        assert!(up.pixels.iter().all(|&p| p == 200));
        let down = resize_letterboxed(&flat, 6, 4, Filter::Bilinear);
        assert_eq!((down.width, down.height), (6, 4));
    }

    #[test]
    fn undecodable_bytes_are_errors_that_say_so() {
        let err = decode(b"hello, not an image").unwrap_err().to_string();
        assert!(err.contains("not an image"), "{err}");
        // A PNG header cut short.
        let err = decode(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot"), "{err}");
    }

    #[test]
    fn a_header_claiming_huge_dimensions_is_refused_before_decoding() {
        // A BMP header claiming 100000 × 100000 pixels, with no pixel data.
        let mut bmp = Vec::new();
        bmp.extend_from_slice(b"BM");
        bmp.extend_from_slice(&(54u32).to_le_bytes());
        bmp.extend_from_slice(&[0; 4]);
        bmp.extend_from_slice(&(54u32).to_le_bytes());
        bmp.extend_from_slice(&(40u32).to_le_bytes());
        bmp.extend_from_slice(&(100_000i32).to_le_bytes());
        bmp.extend_from_slice(&(100_000i32).to_le_bytes());
        bmp.extend_from_slice(&(1u16).to_le_bytes());
        bmp.extend_from_slice(&(24u16).to_le_bytes());
        bmp.extend_from_slice(&[0; 24]);
        let err = decode(&bmp).unwrap_err().to_string();
        assert!(err.contains("too large") || err.contains("16384"), "{err}");
    }
}
