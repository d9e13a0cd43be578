//! A sample's fields from its tar members: the caption (`txt`), the `json` member's
//! fields (the schema of `docs/samples.md`) and the mask (`mask.png`, `seg.png`).

use super::index::{MASK_EXTS, TEXT_EXT};
use crate::sample::{Annotation, Field, Fields, MaskData};
use crate::source::Why;

/// Whether a member with extension `ext` holds a field of `wanted`.
pub(super) fn wanted(ext: &str, wanted: Fields) -> bool {
    if ext == TEXT_EXT {
        wanted.contains(Field::Text)
    } else if MASK_EXTS.contains(&ext) {
        wanted.contains(Field::Mask)
    } else {
        // A json member: any of its fields.
        [
            Field::Labels,
            Field::Text,
            Field::Boxes,
            Field::Keypoints,
            Field::Raw,
            Field::Masks,
        ]
        .into_iter()
        .any(|f| wanted.contains(f))
    }
}

/// Adds the `wanted` fields of one member's `bytes` to `ann`.
pub(super) fn read_member(
    ext: &str,
    bytes: &[u8],
    wanted: Fields,
    ann: &mut Annotation,
) -> Result<(), Why> {
    if ext == TEXT_EXT {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| Why::because(format!("the caption is not UTF-8 text ({e})"), e))?;
        ann.text = Some(text.to_string());
    } else if MASK_EXTS.contains(&ext) {
        ann.mask = Some(MaskData::Png(bytes.to_vec()));
    } else {
        let mut k = None;
        let (_, mut a, _) = crate::source::manifest::parse_fields_json(bytes, &mut k)?;
        if wanted.contains(Field::Masks) {
            a.masks = crate::source::manifest::instance_masks_json(bytes)?;
        }
        // A txt member, when there is one, is the caption.
        ann.take_wanted(a, wanted);
    }
    Ok(())
}

/// Why a sample lacks a field that is wanted and that the data set has, when it does
/// (a caption, a mask): a missing one would otherwise be a silent empty caption or an
/// all-ignore mask.
pub(super) fn missing(ann: &Annotation, wanted: Fields, has: Fields) -> Option<String> {
    let lacks = |f: Field| wanted.contains(f) && has.contains(f);
    if lacks(Field::Mask) && ann.mask.is_none() {
        return Some("no mask member (.mask.png or .seg.png; other samples have one)".into());
    }
    if lacks(Field::Text) && ann.text.is_none() {
        return Some("no caption (.txt, or text in .json; other samples have one)".into());
    }
    None
}
