//! The spanning tree the master assigns: a binary heap over the live workers in the order
//! the master numbered them (by join), so node `i`'s parent is `(i - 1) / 2` and the depth
//! is `floor(log2 n)`. Pure, so the shape and its rebuilds are tested without sockets.

/// A binary tree over `members` (any ids; the first is the root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree<T> {
    /// Rebuilt trees get a higher generation; a worker keeps the chunks of one generation
    /// apart from another's, so a restarted reduce never mixes with the one it replaces.
    pub generation: u64,
    members: Vec<T>,
}

impl<T: Clone + PartialEq> Tree<T> {
    pub fn new(generation: u64, members: Vec<T>) -> Self {
        Self { generation, members }
    }

    pub fn members(&self) -> &[T] {
        &self.members
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    fn index(&self, member: &T) -> Option<usize> {
        self.members.iter().position(|m| m == member)
    }

    /// The parent of `member`; `None` for the root and for non-members.
    pub fn parent(&self, member: &T) -> Option<&T> {
        let i = self.index(member)?;
        (i > 0).then(|| &self.members[(i - 1) / 2])
    }

    /// The children of `member` (at most two).
    pub fn children(&self, member: &T) -> Vec<&T> {
        let Some(i) = self.index(member) else { return Vec::new() };
        [2 * i + 1, 2 * i + 2].into_iter().filter_map(|c| self.members.get(c)).collect()
    }

    pub fn root(&self) -> Option<&T> {
        self.members.first()
    }

    /// Levels below the root: the number of hops a chunk travels up (and again down).
    pub fn depth(&self) -> usize {
        self.members.len().checked_ilog2().map_or(0, |d| d as usize)
    }

    /// Whether this tree spans exactly `members` in that order (else it must be rebuilt).
    pub fn spans(&self, members: &[T]) -> bool {
        self.members == members
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every member but the root has one parent, every member is reached from the root
    /// exactly once, and no node has more than two children — for every size up to 70.
    #[test]
    fn a_binary_tree_spans_every_member_once() {
        for n in 1..=70usize {
            let tree = Tree::new(1, (0..n).map(|i| format!("w{i}")).collect());
            let mut reached = vec![0; n];
            let mut stack = vec![tree.root().unwrap().clone()];
            while let Some(node) = stack.pop() {
                let i: usize = node[1..].parse().unwrap();
                reached[i] += 1;
                let children = tree.children(&node);
                assert!(children.len() <= 2);
                for c in children {
                    assert_eq!(tree.parent(c), Some(&node), "{c}'s parent in a tree of {n}");
                    stack.push(c.clone());
                }
            }
            assert!(reached.iter().all(|&r| r == 1), "n = {n}: {reached:?}");
            assert_eq!(tree.parent(&"w0".to_string()), None);
            assert_eq!(tree.depth(), (n as f64).log2().floor() as usize);
        }
    }

    #[test]
    fn a_tree_knows_whether_it_spans_the_current_members() {
        let tree = Tree::new(3, vec![1u64, 2, 4]);
        assert!(tree.spans(&[1, 2, 4]));
        assert!(!tree.spans(&[1, 4]), "a member lost: rebuild");
        assert!(!tree.spans(&[1, 2, 4, 5]), "a member joined: rebuild");
        assert_eq!(tree.children(&1), [&2, &4]);
        assert_eq!(tree.parent(&9), None);
        assert!(tree.children(&9).is_empty(), "a non-member has no place in the tree");
        assert_eq!(Tree::<u64>::new(0, vec![]).depth(), 0);
    }
}
