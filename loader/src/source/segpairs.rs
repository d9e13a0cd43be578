//! Segmentation pairs: a folder of images and a folder of mask PNGs with the same
//! stems (the VOC and ADE20K layout: `images/a/0001.jpg` pairs with
//! `masks/a/0001.png`), local or behind URLs. A mask's pixel values are classes.

use super::folder::is_image;
use super::place::{Base, Place};
use super::{OpenOptions, RecordKind, Source, SourceError};
use crate::sample::{Annotation, Field, Fields, MaskData};

/// Images and their masks, paired by stem.
#[derive(Debug)]
pub struct SegPairs {
    what: String,
    images: Base,
    masks: Base,
    samples: Vec<(Place, Option<Place>)>,
    /// The masks folder, for the message of an image without one.
    masks_what: String,
}

/// A name without its extension.
fn stem(name: &str) -> &str {
    let file_start = name.rfind('/').map_or(0, |i| i + 1);
    match name[file_start..].rfind('.') {
        Some(dot) => &name[..file_start + dot],
        None => name,
    }
}

impl SegPairs {
    /// Pairs the images under `images` with the PNGs under `masks` (paths or URLs).
    pub fn open(images: &str, masks: &str, options: &OpenOptions) -> Result<SegPairs, SourceError> {
        let image_base = Base::open(images, options)?;
        let mask_base = Base::open(masks, options)?;
        let mask_names: std::collections::HashMap<String, String> = mask_base
            .names()?
            .into_iter()
            .filter(|n| n.to_ascii_lowercase().ends_with(".png"))
            .map(|n| (stem(&n).to_string(), n))
            .collect();
        let mut samples = Vec::new();
        for name in image_base.names()? {
            if !is_image(std::path::Path::new(&name)) {
                continue;
            }
            let image = image_base
                .resolve(&name)
                .map_err(|r| SourceError::format(images, r))?;
            let mask = match mask_names.get(stem(&name)) {
                Some(m) => Some(
                    mask_base
                        .resolve(m)
                        .map_err(|r| SourceError::format(masks, r))?,
                ),
                None => None,
            };
            samples.push((image, mask));
        }
        if samples.is_empty() {
            return Err(SourceError::format(
                images,
                "no images (.jpg, .jpeg, .png, .webp) to pair with masks",
            ));
        }
        if samples.iter().all(|(_, m)| m.is_none()) {
            return Err(SourceError::format(
                masks,
                format!("no mask PNG has the stem of an image under {images}"),
            ));
        }
        Ok(SegPairs {
            what: images.to_string(),
            images: image_base,
            masks: mask_base,
            samples,
            masks_what: masks.to_string(),
        })
    }

    fn sample(&self, index: usize) -> Result<&(Place, Option<Place>), SourceError> {
        self.samples.get(index).ok_or_else(|| {
            SourceError::record(
                format!("{} sample {index}", self.what),
                format!("index out of range (there are {})", self.samples.len()),
            )
        })
    }
}

/// True when `dir` holds the `images/` and `masks/` folders of segmentation pairs.
pub fn is_pairs_dir(dir: &std::path::Path) -> bool {
    dir.join("images").is_dir() && dir.join("masks").is_dir()
}

impl Source for SegPairs {
    fn len(&self) -> usize {
        self.samples.len()
    }

    fn classes(&self) -> &[String] {
        &[]
    }

    fn label(&self, _index: usize) -> u32 {
        0
    }

    fn describe(&self, index: usize) -> String {
        match self.samples.get(index) {
            Some((image, _)) => image.describe(),
            None => format!("{} sample {index} (out of range)", self.what),
        }
    }

    fn read(&self, index: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
        self.sample(index)?.0.read(&self.images, buf)?;
        Ok(RecordKind::Encoded)
    }

    fn format(&self) -> &'static str {
        "segmentation"
    }

    fn fields(&self) -> Fields {
        Fields::of(&[Field::Image, Field::Mask])
    }

    fn read_sample(
        &self,
        index: usize,
        wanted: Fields,
        buf: &mut Vec<u8>,
        ann: &mut Annotation,
    ) -> Result<RecordKind, SourceError> {
        ann.clear();
        let (image, mask) = self.sample(index)?;
        image.read(&self.images, buf)?;
        if wanted.contains(Field::Mask) {
            let mask = mask.as_ref().ok_or_else(|| {
                SourceError::record(
                    image.describe(),
                    format!("no mask with this stem under {}", self.masks_what),
                )
            })?;
            let mut bytes = Vec::new();
            mask.read(&self.masks, &mut bytes).map_err(|e| {
                SourceError::record(image.describe(), format!("mask: {e}")).caused_by(e)
            })?;
            ann.mask = Some(MaskData::Png(bytes));
        }
        Ok(RecordKind::Encoded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems_keep_folders_and_drop_extensions() {
        assert_eq!(stem("a/b/0001.jpg"), "a/b/0001");
        assert_eq!(stem("x.y/0001"), "x.y/0001");
        assert_eq!(stem("0001.tar.png"), "0001.tar");
    }
}
