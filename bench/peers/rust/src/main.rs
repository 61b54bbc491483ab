//! The Rust peer of ckpt's benchmark driver (bench/cmd/peers): the
//! `safetensors` crate used the way a competent Rust user would, on the
//! same files as ckpt, in a fresh process per run.
//!
//!     ckpt-peer convert PATH        every tensor to a Vec<f32> (BF16/F16/F32)
//!     ckpt-peer steady PATH ITERS   convert ITERS times in this process;
//!                                   seconds: median of the iterations after
//!                                   the first (each iteration's outputs are
//!                                   dropped after its timer, so the
//!                                   allocator reuses that memory where it does)
//!     ckpt-peer open PATH           open every shard, look every tensor up
//!
//! PATH is a .safetensors file or a *.index.json naming shards in its
//! folder. Files are mmap'd (memmap2) and parsed with
//! SafeTensors::deserialize; conversion runs on all cores with rayon,
//! across tensors and within large ones (half's slice conversion). The
//! timer covers opening, parsing and converting, not the final free.
//! Output: one line
//!
//!     RESULT impl=rust op=OP seconds=S bytes=B tensors=N check=C
//!
//! where bytes counts source bytes and check is ckpt's sampled checksum of
//! the F32 output (bench/cmd/peers: checksum), so the driver can see that
//! every implementation produced the same values.

use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use half::{bf16, f16};
use memmap2::Mmap;
use rayon::prelude::*;
use safetensors::{Dtype, SafeTensors};
use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Elements converted per rayon task within one tensor.
const CHUNK: usize = 1 << 18;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 && !(args.len() == 4 && args[1] == "steady") {
        eprintln!("usage: ckpt-peer convert|open PATH | ckpt-peer steady PATH ITERS");
        std::process::exit(2);
    }
    let r = match args[1].as_str() {
        "convert" => convert(Path::new(&args[2])),
        "steady" => args[3]
            .parse::<usize>()
            .map_err(|e| e.into())
            .and_then(|n| steady(Path::new(&args[2]), n)),
        "open" => open(Path::new(&args[2])),
        op => Err(format!("unknown op {op}").into()),
    };
    if let Err(e) = r {
        eprintln!("ckpt-peer: {e}");
        std::process::exit(1);
    }
}

/// The shard files of path (an index's distinct shards, sorted) and the
/// index's weight map (empty for a single file).
fn shards(path: &Path) -> Res<(Vec<PathBuf>, Vec<(String, String)>)> {
    if path.extension().and_then(|e| e.to_str()) != Some("json") {
        return Ok((vec![path.to_path_buf()], Vec::new()));
    }
    let ix: serde_json::Value = serde_json::from_reader(std::io::BufReader::new(File::open(path)?))?;
    let wm = ix["weight_map"].as_object().ok_or("index has no weight_map")?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut files = BTreeSet::new();
    let mut map = Vec::with_capacity(wm.len());
    for (name, shard) in wm {
        let shard = shard.as_str().ok_or("weight_map value is not a string")?;
        files.insert(shard.to_string());
        map.push((name.clone(), shard.to_string()));
    }
    Ok((files.into_iter().map(|f| dir.join(f)).collect(), map))
}

fn map_files(files: &[PathBuf]) -> Res<Vec<Mmap>> {
    files
        .iter()
        .map(|p| -> Res<Mmap> { Ok(unsafe { Mmap::map(&File::open(p)?)? }) })
        .collect()
}

fn to_f32(dtype: Dtype, src: &[u8]) -> Res<Vec<f32>> {
    let width = match dtype {
        Dtype::BF16 | Dtype::F16 => 2,
        Dtype::F32 => 4,
        d => return Err(format!("dtype {d:?} not handled").into()),
    };
    let n = src.len() / width;
    let mut out = vec![0f32; n];
    match dtype {
        Dtype::F32 => out
            .par_chunks_mut(CHUNK)
            .zip(src.par_chunks(CHUNK * 4))
            .for_each(|(d, s)| {
                for (o, b) in d.iter_mut().zip(s.chunks_exact(4)) {
                    *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }),
        _ => {
            // The data section is 8-aligned by every writer; a 2-aligned
            // tensor is viewed in place, anything else is decoded bytewise.
            let (pre, halves, _) = unsafe { src.align_to::<u16>() };
            if !pre.is_empty() {
                return Err("misaligned 16-bit tensor".into());
            }
            out.par_chunks_mut(CHUNK).zip(halves.par_chunks(CHUNK)).for_each(|(d, s)| {
                if dtype == Dtype::BF16 {
                    s.reinterpret_cast::<bf16>().convert_to_f32_slice(d)
                } else {
                    s.reinterpret_cast::<f16>().convert_to_f32_slice(d)
                }
            })
        }
    }
    Ok(out)
}

/// ckpt's sampled checksum: the wrapping sum of the bits of every 1021st
/// element and of the last, over all tensors (order-independent).
fn checksum(v: &[f32]) -> u64 {
    let mut c = 0u64;
    let mut i = 0;
    while i < v.len() {
        c = c.wrapping_add(v[i].to_bits() as u64);
        i += 1021;
    }
    if let Some(last) = v.last() {
        c = c.wrapping_add(last.to_bits() as u64);
    }
    c
}

/// One load: open, map, parse and convert every tensor. It returns the
/// seconds that took (not counting the drop of the outputs), the source
/// bytes, the tensors and the checksum.
fn convert_once(path: &Path) -> Res<(f64, usize, usize, u64)> {
    let start = Instant::now();
    let (files, _) = shards(path)?;
    let maps = map_files(&files)?;
    let sts = maps.iter().map(|m| SafeTensors::deserialize(m)).collect::<Result<Vec<_>, _>>()?;
    let views: Vec<_> = sts.iter().flat_map(|st| st.tensors()).collect();
    let outs = views
        .par_iter()
        .map(|(_, v)| to_f32(v.dtype(), v.data()).map_err(|e| e.to_string()))
        .collect::<Result<Vec<Vec<f32>>, String>>()?;
    let secs = start.elapsed().as_secs_f64();
    let bytes: usize = views.iter().map(|(_, v)| v.data().len()).sum();
    let check = outs.iter().fold(0u64, |c, o| c.wrapping_add(checksum(o)));
    Ok((secs, bytes, views.len(), check))
}

fn convert(path: &Path) -> Res<()> {
    let (secs, bytes, n, check) = convert_once(path)?;
    println!("RESULT impl=rust op=convert seconds={secs:.6} bytes={bytes} tensors={n} check={check}");
    Ok(())
}

fn steady(path: &Path, iters: usize) -> Res<()> {
    if iters < 2 {
        return Err("ITERS must be at least 2".into());
    }
    let mut times = Vec::with_capacity(iters);
    let mut last = (0, 0, 0);
    for _ in 0..iters {
        let (secs, bytes, n, check) = convert_once(path)?;
        times.push(secs);
        last = (bytes, n, check);
    }
    let mut later = times[1..].to_vec();
    later.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let k = later.len();
    let secs = if k % 2 == 1 { later[k / 2] } else { (later[k / 2 - 1] + later[k / 2]) / 2.0 };
    let (bytes, n, check) = last;
    println!("RESULT impl=rust op=steady seconds={secs:.6} bytes={bytes} tensors={n} check={check}");
    Ok(())
}

fn open(path: &Path) -> Res<()> {
    let start = Instant::now();
    let (files, map) = shards(path)?;
    let maps = map_files(&files)?;
    let sts = maps.iter().map(|m| SafeTensors::deserialize(m)).collect::<Result<Vec<_>, _>>()?;
    let pos: HashMap<&Path, usize> = files.iter().enumerate().map(|(i, f)| (f.as_path(), i)).collect();
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut bytes = 0usize;
    let mut n = 0usize;
    if map.is_empty() {
        for (_, v) in sts[0].iter() {
            bytes += v.data().len();
            n += 1;
        }
    } else {
        // One lookup per shard name, not per tensor.
        let mut shard_of: HashMap<&str, usize> = HashMap::new();
        for (_, shard) in &map {
            if !shard_of.contains_key(shard.as_str()) {
                shard_of.insert(shard, pos[dir.join(shard).as_path()]);
            }
        }
        for (name, shard) in &map {
            bytes += sts[shard_of[shard.as_str()]].tensor(name)?.data().len();
            n += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!("RESULT impl=rust op=open seconds={secs:.6} bytes={bytes} tensors={n} check=0");
    Ok(())
}
