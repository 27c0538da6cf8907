//! The real Passmower on the node: installed from its upstream chart by helm, with `inject`
//! as the post-renderer.
