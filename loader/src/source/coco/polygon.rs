//! COCO polygons to pixels: a pixel belongs to a polygon when its centre lies inside
//! it by the even-odd rule, found row by row with a scanline. pycocotools rasterises
//! on a 5x finer grid and rounds, so the two may differ by a pixel along an edge and
//! agree everywhere else; a rectangle on whole pixels is exact in both.

/// Checks one polygon `[x0, y0, x1, y1, ...]`: whole points, at least 3 of them,
/// every coordinate finite.
pub fn check(xy: &[f32]) -> Result<(), String> {
    if !xy.len().is_multiple_of(2) {
        return Err(format!(
            "a polygon has {} coordinates, not whole (x, y) points",
            xy.len()
        ));
    }
    if xy.len() < 6 {
        return Err(format!(
            "a polygon has {} points; it needs at least 3",
            xy.len() / 2
        ));
    }
    if let Some(v) = xy.iter().find(|v| !v.is_finite()) {
        return Err(format!("a polygon coordinate is {v}, not a number"));
    }
    Ok(())
}

/// Sets `value` in the row-major `width` x `height` map `out` at every pixel whose
/// centre lies inside the polygon `xy` (checked by [`check`]). `xs` is scratch.
pub fn paint(
    xy: &[f32],
    width: usize,
    height: usize,
    value: u8,
    out: &mut [u8],
    xs: &mut Vec<f64>,
) {
    let n = xy.len() / 2;
    let pt = |i: usize| (f64::from(xy[2 * i]), f64::from(xy[2 * i + 1]));
    let (mut ymin, mut ymax) = (f64::INFINITY, f64::NEG_INFINITY);
    for i in 0..n {
        let y = pt(i).1;
        ymin = ymin.min(y);
        ymax = ymax.max(y);
    }
    // Rows whose centre y + 0.5 lies in [ymin, ymax).
    let first = pixel_at_or_after(ymin, height);
    let end = pixel_at_or_after(ymax, height);
    for y in first..end {
        let yc = y as f64 + 0.5;
        xs.clear();
        for i in 0..n {
            let (ax, ay) = pt(i);
            let (bx, by) = pt((i + 1) % n);
            // Half-open in y: a vertex on the scanline counts for one of its edges
            // only, so the crossings pair up.
            if (ay <= yc) != (by <= yc) {
                xs.push(ax + (yc - ay) * (bx - ax) / (by - ay));
            }
        }
        xs.sort_by(f64::total_cmp);
        let row = &mut out[y * width..(y + 1) * width];
        for pair in xs.chunks_exact(2) {
            let from = pixel_at_or_after(pair[0], width);
            let to = pixel_at_or_after(pair[1], width);
            if from < to {
                row[from..to].fill(value);
            }
        }
    }
}

/// The first pixel whose centre is at or after `v`, clamped to `0..=limit`.
fn pixel_at_or_after(v: f64, limit: usize) -> usize {
    // Saturating casts: a coordinate far outside the image clamps to its edge.
    ((v - 0.5).ceil().max(0.0) as usize).min(limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(xy: &[f32], w: usize, h: usize) -> Vec<u8> {
        check(xy).unwrap();
        let mut out = vec![0u8; w * h];
        paint(xy, w, h, 1, &mut out, &mut Vec::new());
        out
    }

    /// The even-odd rule at each pixel centre, by casting a ray to the right.
    fn inside(xy: &[f32], px: f64, py: f64) -> bool {
        let n = xy.len() / 2;
        let mut inside = false;
        for i in 0..n {
            let (ax, ay) = (f64::from(xy[2 * i]), f64::from(xy[2 * i + 1]));
            let j = (i + 1) % n;
            let (bx, by) = (f64::from(xy[2 * j]), f64::from(xy[2 * j + 1]));
            if (ay <= py) != (by <= py) && px < ax + (py - ay) * (bx - ax) / (by - ay) {
                inside = !inside;
            }
        }
        inside
    }

    fn brute(xy: &[f32], w: usize, h: usize) -> Vec<u8> {
        (0..w * h)
            .map(|i| u8::from(inside(xy, (i % w) as f64 + 0.5, (i / w) as f64 + 0.5)))
            .collect()
    }

    #[test]
    fn a_rectangle_on_whole_pixels_is_exact() {
        let (w, h) = (10, 8);
        let out = fill(&[2.0, 1.0, 7.0, 1.0, 7.0, 5.0, 2.0, 5.0], w, h);
        for y in 0..h {
            for x in 0..w {
                let want = u8::from((2..7).contains(&x) && (1..5).contains(&y));
                assert_eq!(out[y * w + x], want, "({x}, {y})");
            }
        }
        // Counter-clockwise, and past the image's edges: clipped, still exact.
        let out = fill(&[-3.0, -2.0, -3.0, 20.0, 4.0, 20.0, 4.0, -2.0], w, h);
        assert_eq!(out.iter().map(|&v| usize::from(v)).sum::<usize>(), 4 * h);
        assert!((0..h).all(|y| out[y * w..y * w + 4] == [1; 4]));
    }

    #[test]
    fn a_triangle_covers_its_area_within_its_edge_pixels() {
        let (w, h) = (64, 64);
        let tri = [3.2, 5.7, 58.9, 12.4, 20.5, 60.1];
        let out = fill(&tri, w, h);
        let count = out.iter().filter(|&&v| v == 1).count() as f64;
        let (a, b, c) = ((3.2f64, 5.7f64), (58.9f64, 12.4f64), (20.5f64, 60.1f64));
        let area = ((b.0 - a.0) * (c.1 - a.1) - (c.0 - a.0) * (b.1 - a.1)).abs() / 2.0;
        // Every pixel the boundary does not cross is decided correctly, so the count is
        // off by less than half the pixels along the perimeter.
        let perimeter: f64 = [(a, b), (b, c), (c, a)]
            .iter()
            .map(|(p, q)| (p.0 - q.0).hypot(p.1 - q.1))
            .sum();
        assert!(
            (count - area).abs() < perimeter / 2.0,
            "{count} pixels for an area of {area}"
        );
        assert_eq!(out, brute(&tri, w, h), "pixel centres inside");
    }

    #[test]
    fn self_crossing_polygons_use_the_even_odd_rule() {
        // A five-pointed star drawn in one stroke: its centre pentagon is outside.
        let (w, h) = (40, 40);
        let star: Vec<f32> = (0..5)
            .flat_map(|k| {
                let t = std::f32::consts::PI * (0.5 + 0.8 * k as f32);
                [20.0 + 18.0 * t.cos(), 20.0 - 18.0 * t.sin()]
            })
            .collect();
        let out = fill(&star, w, h);
        assert_eq!(out[20 * w + 20], 0, "the centre is crossed twice");
        assert_eq!(out, brute(&star, w, h));
        assert!(out.contains(&1));
    }

    #[test]
    fn bad_polygons_say_what_is_wrong() {
        assert!(check(&[0.0, 0.0, 1.0, 1.0])
            .unwrap_err()
            .contains("2 points"));
        assert!(check(&[0.0, 0.0, 1.0, 1.0, 2.0])
            .unwrap_err()
            .contains("not whole"));
        assert!(check(&[0.0, 0.0, 1.0, f32::NAN, 2.0, 2.0])
            .unwrap_err()
            .contains("NaN"));
    }
}
