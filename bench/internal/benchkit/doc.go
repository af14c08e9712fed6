// Package benchkit is what the benchmark programs under bench/ share: one
// run of a program (its signal-cancelled context, its temporary directory
// under -dir, its cleanups and its notes), engines opened on the embedded
// store with an NFS server and a FUSE mount, the repeating data pattern
// that every program writes and checks, and the table and files a program
// leaves in -out.
//
// A program keeps its own measurements, tables and flags; benchkit holds
// only what was the same in each. Every mount, server and temporary
// directory it makes is a cleanup of the Run, so an interrupted or failed
// program leaves nothing mounted behind. The embedded store changes the
// process's working directory, so a Run makes -dir, -out and any other
// path flag absolute before anything opens it.
package benchkit
