--[[
job_submit.lua for the hpcdispatch Slurm bridge (Slurm 22.05, JobSubmitPlugins=lua).

Every job submitted to a partition the bridge manages is held (priority 0) at submission, so
that Slurm's own scheduler never starts it: the bridge picks the job up, asks hpcdispatch where
it starts, pins it (scontrol update NodeList=...) and releases it.

Install next to slurm.conf as job_submit.lua and list the same partitions as the bridge's
--partition flags. A job submitted without -p lands in the default partition; set
DEFAULT_PARTITION to its name when that partition is managed.
]]

MANAGED_PARTITIONS = { batch = true }
DEFAULT_PARTITION = "batch"

local function is_managed(partition)
   if partition == nil or partition == "" then
      partition = DEFAULT_PARTITION
   end
   for name in string.gmatch(partition, "[^,]+") do
      if MANAGED_PARTITIONS[name] then
         return true
      end
   end
   return false
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   if is_managed(job_desc.partition) then
      job_desc.priority = 0
      slurm.log_info("hpcdispatch: holding job %s of user %u in %s for the bridge",
                     tostring(job_desc.name), submit_uid, tostring(job_desc.partition))
   end
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end

return slurm.SUCCESS
