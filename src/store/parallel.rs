//! Work on many items shared among the cores: a batch's rows encoded, a
//! load's blocks built.

/// `work` over `items` in consecutive parts, one per core when there are
/// at least `min_part` items a part (else all here); the parts' results
/// in order. A part whose thread cannot be started is done here, after.
pub(crate) fn in_parts<T: Sync, R: Send>(
    items: &[T],
    min_part: usize,
    work: impl Fn(&[T]) -> R + Sync,
) -> Vec<R> {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cores = *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let parts = cores.min(items.len() / min_part.max(1)).max(1);
    if parts == 1 {
        return vec![work(items)];
    }
    let chunk = items.len().div_ceil(parts);
    let work = &work;
    std::thread::scope(|scope| {
        let mut chunks = items.chunks(chunk);
        let first = chunks.next().unwrap_or_default();
        let others: Vec<_> = chunks
            .map(|part| {
                std::thread::Builder::new()
                    .spawn_scoped(scope, move || work(part))
                    .map_err(|_| part)
            })
            .collect();
        let mut done = vec![work(first)];
        for other in others {
            done.push(match other {
                Ok(thread) => thread
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(part) => work(part),
            });
        }
        done
    })
}

#[cfg(test)]
mod tests {
    use super::in_parts;

    #[test]
    fn parts_come_back_in_order() {
        let items: Vec<u32> = (0..10_000).collect();
        let sums = in_parts(&items, 100, |part| part.to_vec());
        assert_eq!(sums.concat(), items);
        assert_eq!(in_parts(&items[..5], 100, |p| p.len()), vec![5]);
        assert_eq!(in_parts(&[] as &[u32], 100, |p| p.len()), vec![0]);
    }
}
