//! Builds engram's built-in static embedding model from all-MiniLM-L6-v2, as model2vec distils
//! one: each token of the model's vocabulary read by the model on its own
//! ([`MiniLm::token_vectors`]), the vectors reduced by PCA to `--dims` dimensions, each weighted
//! by how rare its token is (SIF weighting, frequencies estimated by Zipf's law from the
//! vocabulary's order, which is by frequency), and stored as one signed byte a dimension with a
//! scale a token. No data set is needed, and nothing here runs when engram does: the file it
//! writes is committed (`crates/engram/assets/minilm-static.bin`, with the model's licence).
//!
//! ```text
//! cargo run --release -p engram-embed --example distill_static -- \
//!     ~/.cache/engram-ci/minilm crates/engram/assets/minilm-static.bin
//! ```
//!
//! The file: `ENGSTAT1`, the vocabulary's size and the dimensions (u32 little-endian each), each
//! token (u16 length, UTF-8 bytes), then each token's scale (f32) and its dimensions (i8).

// Matrix code reads as its formulas: rows and columns by index.
#![allow(clippy::needless_range_loop)]

use std::io::Write;
use std::path::PathBuf;

use engram_embed::MiniLm;

/// SIF's coefficient (model2vec's default): a token seen with probability `p` weighs
/// `SIF / (SIF + p)`.
const SIF: f64 = 1e-4;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: distill_static MODEL_DIR OUT_FILE [--dims N]";
    let model_dir = PathBuf::from(args.next().ok_or(usage)?);
    let out = PathBuf::from(args.next().ok_or(usage)?);
    let mut dims = 256usize;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dims" => dims = args.next().ok_or(usage)?.parse()?,
            _ => return Err(usage.into()),
        }
    }
    let model = MiniLm::load(&model_dir)?;
    let vocabulary = model.vocabulary();
    // The tokens text is made of: not the special ones, nor the placeholders never trained.
    let kept: Vec<(u32, String)> = vocabulary
        .into_iter()
        .enumerate()
        .filter(|(_, t)| !(t.starts_with('[') && t.ends_with(']')))
        .map(|(id, t)| (id as u32, t))
        .collect();
    eprintln!("{} tokens", kept.len());
    let mut vectors: Vec<Vec<f64>> = Vec::with_capacity(kept.len());
    for (i, chunk) in kept.chunks(256).enumerate() {
        let ids: Vec<u32> = chunk.iter().map(|(id, _)| *id).collect();
        for v in model.token_vectors(&ids)? {
            vectors.push(v.into_iter().map(f64::from).collect());
        }
        if i % 10 == 0 {
            eprintln!("read {} of {}", vectors.len(), kept.len());
        }
    }
    let width = vectors[0].len();
    let dims = dims.min(width);
    // PCA: the vectors centred, projected on the covariance's `dims` largest eigenvectors.
    let n = vectors.len() as f64;
    let mut mean = vec![0.0; width];
    for v in &vectors {
        for (m, x) in mean.iter_mut().zip(v) {
            *m += x / n;
        }
    }
    for v in vectors.iter_mut() {
        for (x, m) in v.iter_mut().zip(&mean) {
            *x -= m;
        }
    }
    let mut cov = vec![vec![0.0; width]; width];
    for v in &vectors {
        for i in 0..width {
            let vi = v[i];
            let row = &mut cov[i];
            for j in i..width {
                row[j] += vi * v[j];
            }
        }
    }
    for i in 0..width {
        for j in i..width {
            cov[i][j] /= n;
            cov[j][i] = cov[i][j];
        }
    }
    let (values, basis) = jacobi_eigen(cov);
    let mut order: Vec<usize> = (0..width).collect();
    order.sort_by(|&a, &b| values[b].total_cmp(&values[a]));
    let explained: f64 =
        order[..dims].iter().map(|&i| values[i]).sum::<f64>() / values.iter().sum::<f64>();
    eprintln!("{dims} dimensions keep {:.3} of the variance", explained);
    // SIF: the `i`th token's probability by Zipf's law is `1 / (i + 2)` over the sum of them.
    let total: f64 = (0..kept.len()).map(|i| 1.0 / (i as f64 + 2.0)).sum();
    let mut file = std::io::BufWriter::new(std::fs::File::create(&out)?);
    file.write_all(b"ENGSTAT1")?;
    file.write_all(&(kept.len() as u32).to_le_bytes())?;
    file.write_all(&(dims as u32).to_le_bytes())?;
    for (_, token) in &kept {
        file.write_all(&(token.len() as u16).to_le_bytes())?;
        file.write_all(token.as_bytes())?;
    }
    for (i, v) in vectors.iter().enumerate() {
        let p = 1.0 / (i as f64 + 2.0) / total;
        let weight = SIF / (SIF + p);
        let projected: Vec<f64> = order[..dims]
            .iter()
            .map(|&k| weight * (0..width).map(|d| v[d] * basis[d][k]).sum::<f64>())
            .collect();
        let top = projected
            .iter()
            .fold(0.0f64, |m, x| m.max(x.abs()))
            .max(1e-12);
        let scale = top / 127.0;
        file.write_all(&(scale as f32).to_le_bytes())?;
        let bytes: Vec<u8> = projected
            .iter()
            .map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8 as u8)
            .collect();
        file.write_all(&bytes)?;
    }
    file.flush()?;
    eprintln!("wrote {}", out.display());
    Ok(())
}

/// The eigenvalues and eigenvectors (as columns) of the symmetric matrix `a`, by cyclic Jacobi
/// rotations.
fn jacobi_eigen(mut a: Vec<Vec<f64>>) -> (Vec<f64>, Vec<Vec<f64>>) {
    let n = a.len();
    let mut v = vec![vec![0.0; n]; n];
    for (i, row) in v.iter_mut().enumerate() {
        row[i] = 1.0;
    }
    for _sweep in 0..50 {
        let off: f64 = (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i][j] * a[i][j])
            .sum();
        if off < 1e-18 {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                if a[p][q].abs() < 1e-15 {
                    continue;
                }
                let theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..n {
                    let (akp, akq) = (a[k][p], a[k][q]);
                    a[k][p] = c * akp - s * akq;
                    a[k][q] = s * akp + c * akq;
                }
                for k in 0..n {
                    let (apk, aqk) = (a[p][k], a[q][k]);
                    a[p][k] = c * apk - s * aqk;
                    a[q][k] = s * apk + c * aqk;
                }
                for row in v.iter_mut() {
                    let (vkp, vkq) = (row[p], row[q]);
                    row[p] = c * vkp - s * vkq;
                    row[q] = s * vkp + c * vkq;
                }
            }
        }
    }
    ((0..n).map(|i| a[i][i]).collect(), v)
}
